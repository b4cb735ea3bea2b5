"""A witness's results list: the (trainer index, commitment) pairs of one step it holds, sorted by index.

    magic "CRL1" | step u32 | count u16 | (index u16 | commitment 32) * count          (little-endian)

Its sha256 is the `results_root` the witness puts on chain, and it is served as a blob under that hash: a
replica whose own list differs from the root a strict majority decided fetches the decided list from any
holder, checks it against the root (the blob id), and applies exactly those results. So every replica
applies the same set by construction, not by each judging its own copy.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass

_HEAD = struct.Struct("<4sIH")
_ENTRY = struct.Struct("<H32s")
MAGIC = b"CRL1"
MAX_ENTRIES = 256  # one per epoch client at most


class ResultsListError(ValueError):
    """Bytes that are not a results list (or not the one expected)."""


@dataclass(frozen=True)
class ResultsList:
    step: int
    entries: tuple[
        tuple[int, bytes], ...
    ]  # (trainer index, commitment), strictly ascending by index

    @classmethod
    def of(cls, step: int, held: Mapping[int, bytes]) -> ResultsList:
        return cls(step, tuple(sorted(held.items())))

    def encode(self) -> bytes:
        return _HEAD.pack(MAGIC, self.step, len(self.entries)) + b"".join(
            _ENTRY.pack(i, c) for i, c in self.entries
        )

    @property
    def root(self) -> bytes:
        return hashlib.sha256(self.encode()).digest()

    @property
    def commitments(self) -> tuple[bytes, ...]:
        """The distinct commitments, in entry order: what an apply aggregates (each result once, so a list
        that names one twice applies the same on every replica instead of failing)."""
        return tuple(dict.fromkeys(c for _, c in self.entries))

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self.entries)

    def participants(self, bitmap_len: int = 32) -> bytes:
        """The bitmap of the trainers in the list (the witness record's participants)."""
        out = bytearray(bitmap_len)
        for i, _ in self.entries:
            out[i // 8] |= 1 << (i % 8)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes, *, step: int, clients: int) -> ResultsList:
        """Strictly: the expected step, indices below `clients`, ascending, commitments 32 bytes."""
        if len(data) < _HEAD.size:
            raise ResultsListError(
                f"a results list is at least {_HEAD.size} bytes, got {len(data)}"
            )
        magic, got_step, count = _HEAD.unpack_from(data)
        if magic != MAGIC:
            raise ResultsListError("not a results list (bad magic)")
        if got_step != step:
            raise ResultsListError(f"results list of step {got_step}, expected {step}")
        if count > min(MAX_ENTRIES, clients) or len(data) != _HEAD.size + count * _ENTRY.size:
            raise ResultsListError(
                f"results list of {len(data)} bytes does not hold {count} entries"
            )
        entries = tuple(
            _ENTRY.unpack_from(data, _HEAD.size + k * _ENTRY.size) for k in range(count)
        )
        indices = [i for i, _ in entries]
        if indices != sorted(set(indices)) or (indices and indices[-1] >= clients):
            raise ResultsListError("results list indices are not ascending epoch client indices")
        return cls(step, entries)
