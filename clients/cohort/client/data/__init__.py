"""Training data: providers that map a batch id to the same tokens everywhere (local shards,
HTTP, a TCP data server, built-in corpora), tokenizers, and preparing text into shards.

The names below load on first use (PEP 562): `cohort data --help` and every `data` error must not pay for
importing torch and numpy, which most of these modules need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .batch import BatchId, split_batch
    from .corpus import kjv_text, load_corpus, pydoc_text
    from .dataset import TokenDataset
    from .layout import SequenceLayout, Split
    from .location import open_data_location
    from .preparation import PreparedData, prepare
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

# public name -> the module that defines it
_LAZY = {
    "BatchId": ".batch",
    "split_batch": ".batch",
    "kjv_text": ".corpus",
    "load_corpus": ".corpus",
    "pydoc_text": ".corpus",
    "TokenDataset": ".dataset",
    "SequenceLayout": ".layout",
    "Split": ".layout",
    "open_data_location": ".location",
    "PreparedData": ".preparation",
    "prepare": ".preparation",
    "DataProvider": ".provider",
    "TokenSequences": ".provider",
    "TokenSource": ".provider",
    "ArrayTokens": ".shards",
    "DataError": ".shards",
    "LocalShards": ".shards",
    "BpeTokenizer": ".tokenizer",
    "ByteTokenizer": ".tokenizer",
    "Tokenizer": ".tokenizer",
    "VocabMismatch": ".tokenizer",
    "check_vocab": ".tokenizer",
    "load_tokenizer": ".tokenizer",
    "train_bpe": ".tokenizer",
}

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


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
