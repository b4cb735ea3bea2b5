"""Offline training data: corpora shipped in packages, a byte tokenizer, sharded sequences."""

from .corpus import kjv_text, load_corpus, pydoc_text
from .dataset import TokenDataset, split_batch
from .tokenizer import ByteTokenizer

__all__ = ["ByteTokenizer", "TokenDataset", "kjv_text", "load_corpus", "pydoc_text", "split_batch"]
