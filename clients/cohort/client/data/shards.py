"""The on-disk format of prepared data, and reading it through memory maps.

    DIR/manifest.json           canonical manifest (cohort.client.p2p.manifest) of DIR/tokens/;
                                its sha256 is the data set's identity
    DIR/tokens/index.json       {"version", "dtype", "n_tokens", "vocab_size", "heldout_fraction",
                                 "tokenizer", "shards": [{"name", "tokens"}]}
    DIR/tokens/shard-00000.bin  little-endian token ids, one stream across the shards
    DIR/tokens/tokenizer.json   when the tokens come from a BPE tokenizer

The same files served by any static HTTP server are what the HTTP provider reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..p2p.manifest import Manifest

MANIFEST_FILE = "manifest.json"
TOKENS_DIR = "tokens"
INDEX_FILE = "index.json"
INDEX_VERSION = 1
MANIFEST_CHUNK = 1 << 20  # the unit HTTP readers fetch, verify and cache
MAX_INDEX_BYTES = 16 << 20
DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
_SHARD_NAME = re.compile(r"^shard-\d{5,9}\.bin$")


class DataError(Exception):
    """Data that cannot be read: missing, malformed, unreachable, or not what was expected."""


@dataclass(frozen=True)
class ShardEntry:
    name: str
    tokens: int


@dataclass(frozen=True)
class DataIndex:
    dtype: str
    vocab_size: int
    heldout_fraction: float
    tokenizer: str  # "byte" or "tokenizer.json"
    shards: tuple[ShardEntry, ...]

    @property
    def n_tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    def encode(self) -> bytes:
        doc = {
            "version": INDEX_VERSION,
            "dtype": self.dtype,
            "n_tokens": self.n_tokens,
            "vocab_size": self.vocab_size,
            "heldout_fraction": self.heldout_fraction,
            "tokenizer": self.tokenizer,
            "shards": [{"name": s.name, "tokens": s.tokens} for s in self.shards],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"

    @classmethod
    def decode(cls, raw: bytes, where: str) -> DataIndex:
        try:
            if len(raw) > MAX_INDEX_BYTES:
                raise ValueError(f"larger than {MAX_INDEX_BYTES} bytes")
            doc = json.loads(raw)
            if doc["version"] != INDEX_VERSION:
                raise ValueError(f"version {doc['version']!r}, expected {INDEX_VERSION}")
            if doc["dtype"] not in DTYPES:
                raise ValueError(f"dtype {doc['dtype']!r} is not one of {sorted(DTYPES)}")
            shards = tuple(ShardEntry(s["name"], s["tokens"]) for s in doc["shards"])
            for s in shards:
                if not isinstance(s.name, str) or not _SHARD_NAME.match(s.name):
                    raise ValueError(f"shard name {s.name!r:.40}")
                if not isinstance(s.tokens, int) or s.tokens < 0:
                    raise ValueError(f"shard {s.name} token count {s.tokens!r}")
            index = cls(
                doc["dtype"],
                int(doc["vocab_size"]),
                float(doc["heldout_fraction"]),
                str(doc["tokenizer"]),
                shards,
            )
            if index.n_tokens != doc["n_tokens"] or not 2 <= index.vocab_size <= 1 << 32:
                raise ValueError("n_tokens or vocab_size inconsistent")
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"{where}: not a valid data index ({e})") from None
        return index


def read_across_shards(
    starts: np.ndarray, offset: int, count: int, read_shard: Callable[[int, int, int], np.ndarray]
) -> np.ndarray:
    """Tokens [offset, offset+count) of a stream cut into shards starting at `starts` (cumulative,
    with the total last); `read_shard(k, at, n)` reads n tokens of shard k from its token `at`."""
    total = int(starts[-1])
    if offset < 0 or count < 0 or offset + count > total:
        raise DataError(f"tokens [{offset}, {offset + count}) are outside the {total} tokens")
    parts, at, end = [], offset, offset + count
    k = int(np.searchsorted(starts, offset, side="right")) - 1
    while at < end:
        take = min(end - at, int(starts[k + 1]) - at)
        parts.append(read_shard(k, at - int(starts[k]), take))
        at += take
        k += 1
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def directory_manifest(directory: Path) -> Manifest:
    """The manifest of a prepared directory's tokens/ folder."""
    return Manifest.of_directory(directory / TOKENS_DIR, MANIFEST_CHUNK)


class LocalShards:
    """A prepared directory on this machine, memory-mapped (any size; pages load on demand)."""

    def __init__(self, directory: str | Path, expected_hash: bytes | None = None) -> None:
        self.directory = Path(directory)
        tokens = self.directory / TOKENS_DIR
        if expected_hash is not None:  # reads every byte: only when the caller pins the data
            try:
                got = directory_manifest(self.directory).hash()
            except ValueError as e:
                raise DataError(f"{self.directory}: {e}") from None
            if got != expected_hash:
                raise DataError(
                    f"{self.directory}: manifest hash {got.hex()[:16]}… is not the expected one"
                )
        try:
            raw = (tokens / INDEX_FILE).read_bytes()
        except OSError as e:
            raise DataError(
                f"{self.directory}: no readable {TOKENS_DIR}/{INDEX_FILE} ({e.strerror})"
            ) from None
        self.index = DataIndex.decode(raw, str(tokens / INDEX_FILE))
        dtype = DTYPES[self.index.dtype]
        self._maps = []
        for s in self.index.shards:
            path = tokens / s.name
            if not path.is_file() or path.stat().st_size != s.tokens * dtype.itemsize:
                raise DataError(f"{path}: missing or not {s.tokens} tokens long")
            self._maps.append(
                np.memmap(path, dtype=dtype, mode="r") if s.tokens else np.empty(0, dtype)
            )
        self._starts = np.cumsum([0] + [s.tokens for s in self.index.shards])
        self.n_tokens = self.index.n_tokens
        self.vocab_size = self.index.vocab_size
        self.heldout_fraction = self.index.heldout_fraction

    def read(self, offset: int, count: int) -> np.ndarray:
        """`count` tokens of the stream from `offset` (may cross shards)."""
        return read_across_shards(
            self._starts, offset, count, lambda k, at, n: np.array(self._maps[k][at : at + n])
        )

    def close(self) -> None:
        self._maps = []


class ArrayTokens:
    """A token stream held in memory (the built-in corpora)."""

    def __init__(self, tokens: np.ndarray, vocab_size: int, heldout_fraction: float = 0.05) -> None:
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        self.n_tokens = len(self.tokens)
        self.vocab_size = vocab_size
        self.heldout_fraction = heldout_fraction

    def read(self, offset: int, count: int) -> np.ndarray:
        return self.tokens[offset : offset + count]

    def close(self) -> None:
        pass
