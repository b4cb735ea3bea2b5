"""`data_location` of a run config → a DataProvider.

    "kjv", "pydoc"          a built-in corpus, tokenized here (bytes unless a tokenizer is given)
    "tcp://HOST:PORT"       a `cohort data serve` server
    "http(s)://HOST/DIR"    a prepared directory on a static HTTP server (range requests)
    "PATH" or "file://PATH" a prepared directory on this machine (memory-mapped)

An optional manifest hash pins prepared data (HTTP checks it on open, local reads every byte).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from .corpus import CORPORA, load_corpus
from .http_source import HttpShards
from .layout import Split
from .provider import DataProvider, TokenSequences
from .shards import ArrayTokens, DataError, LocalShards
from .tcp import TcpDataProvider
from .tokenizer import ByteTokenizer, Tokenizer, VocabMismatch

BUILTIN_HELDOUT = 0.05


def open_data_location(
    location: str,
    seq_len: int,
    *,
    tokenizer: Tokenizer | None = None,
    vocab_size: int | None = None,
    split: Split = "train",
    seed: int = 0,
    expected_hash: bytes | None = None,
) -> DataProvider:
    """The provider `location` names; `vocab_size` (the run's) is checked against the data's."""
    if location in CORPORA:
        tok = tokenizer or ByteTokenizer()
        source = ArrayTokens(tok.encode(load_corpus(location)), tok.vocab_size, BUILTIN_HELDOUT)
        provider: DataProvider = TokenSequences(source, seq_len, split=split, seed=seed)
    elif location.startswith("tcp://"):
        parts = urlsplit(location)
        if not parts.hostname or parts.port is None or parts.path not in ("", "/"):
            raise DataError(f"data location {location!r}: expected tcp://HOST:PORT")
        provider = TcpDataProvider(parts.hostname, parts.port, seq_len, split=split, seed=seed)
    elif location.startswith(("http://", "https://")):
        source = HttpShards(location, expected_hash)
        provider = TokenSequences(source, seq_len, split=split, seed=seed)
    else:
        path = Path(location.removeprefix("file://"))
        provider = TokenSequences(LocalShards(path, expected_hash), seq_len, split=split, seed=seed)
    if vocab_size is not None and provider.vocab_size != vocab_size:
        provider.close()
        raise VocabMismatch(
            f"data location {location!r} holds tokens of a {provider.vocab_size}-token vocabulary, "
            f"but the run's vocab_size is {vocab_size}"
        )
    return provider
