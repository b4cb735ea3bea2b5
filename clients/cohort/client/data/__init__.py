"""Training data: providers that map a batch id to the same tokens everywhere (local shards,
HTTP, a TCP data server, built-in corpora), tokenizers, and preparing text into shards."""

from .batch import BatchId, split_batch
from .corpus import kjv_text, load_corpus, pydoc_text
from .dataset import TokenDataset
from .layout import SequenceLayout, Split
from .location import open_data_location
from .prepare import PreparedData, prepare
from .provider import DataProvider, TokenSequences, TokenSource
from .shards import ArrayTokens, DataError, LocalShards
from .tokenizer import (
    BpeTokenizer,
    ByteTokenizer,
    Tokenizer,
    VocabMismatch,
    check_vocab,
    load_tokenizer,
    train_bpe,
)

__all__ = [
    "ArrayTokens",
    "BatchId",
    "BpeTokenizer",
    "ByteTokenizer",
    "DataError",
    "DataProvider",
    "LocalShards",
    "PreparedData",
    "SequenceLayout",
    "Split",
    "TokenDataset",
    "TokenSequences",
    "TokenSource",
    "Tokenizer",
    "VocabMismatch",
    "check_vocab",
    "kjv_text",
    "load_corpus",
    "load_tokenizer",
    "open_data_location",
    "prepare",
    "pydoc_text",
    "split_batch",
    "train_bpe",
]
