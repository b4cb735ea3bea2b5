"""Offline training data: corpora shipped in packages, a byte tokenizer, sharded sequences."""

from .batch import BatchId, split_batch
from .corpus import kjv_text, load_corpus, pydoc_text
from .dataset import TokenDataset
from .tokenizer import ByteTokenizer

__all__ = [
    "BatchId",
    "ByteTokenizer",
    "TokenDataset",
    "kjv_text",
    "load_corpus",
    "pydoc_text",
    "split_batch",
]
