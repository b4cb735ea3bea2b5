"""Content-addressed blobs held in memory, tagged with the round they belong to.

A blob's id is the sha256 of its bytes. Round results live for a few rounds and are then collected
(`gc`). Anything that can answer `blob_size`/`read_blob` is a `BlobSource` the blob protocol can
serve from (this store, a shared checkpoint directory).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Protocol

HASH_BYTES = 32


def blob_hash(data: bytes | bytearray | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def check_hash(value: bytes) -> bytes:
    if not isinstance(value, bytes) or len(value) != HASH_BYTES:
        raise ValueError(f"a blob hash is {HASH_BYTES} bytes, got {value!r:.80}")
    return value


class BlobSource(Protocol):
    def blob_size(self, blob: bytes) -> int | None:
        """Size of the blob, or None if this source does not hold it."""
        ...

    async def read_blob(self, blob: bytes, offset: int, size: int) -> bytes:
        """`size` bytes of the blob from `offset` (the caller stays inside the blob)."""
        ...


@dataclass
class _Entry:
    data: bytes
    round: int
    max_uploads: int | None = None  # copies served in all while limited (None: no limit)
    limited_until: float = 0.0  # monotonic time the limit ends (then anyone may fetch it here)
    uploads: int = 0  # copies started


class BlobStore:
    """In-memory blobs by hash; the blob protocol serves them to anyone on the allowlist."""

    def __init__(self) -> None:
        self._blobs: dict[bytes, _Entry] = {}

    def put(self, data: bytes, round: int, *, max_uploads: int | None = None, limited_for: float = 0.0) -> bytes:
        """Store `data` as part of `round`; returns its hash. Storing it again keeps the later round.
        `max_uploads` caps the copies served during the first `limited_for` seconds (the blob server
        answers BUSY beyond it): a result's author serves its first few fetchers, and they serve the
        rest, so its upload does not grow with the run; after that anyone may still fetch it here."""
        if not isinstance(data, bytes):
            raise TypeError("blob data must be bytes")
        h = blob_hash(data)
        self.put_verified(h, data, round, max_uploads=max_uploads, limited_for=limited_for)
        return h

    def put_verified(self, blob: bytes, data: bytes, round: int, *, max_uploads: int | None = None,
                     limited_for: float = 0.0) -> None:  # fmt: skip
        """Store bytes whose hash the caller has already checked (after a fetch)."""
        check_hash(blob)
        if not isinstance(round, int) or round < 0:
            raise ValueError(f"round must be a non-negative int, got {round!r}")
        entry = self._blobs.get(blob)
        if entry is None:
            self._blobs[blob] = _Entry(data, round, max_uploads, time.monotonic() + limited_for)
        else:
            entry.round = max(entry.round, round)

    def take_upload(self, blob: bytes, count: bool = True) -> bool:
        """Whether one more copy of `blob` may be served now (it counts that copy unless `count` is false:
        the later parts of a copy fetched in parts)."""
        entry = self._blobs.get(blob)
        if entry is None:
            return True
        if entry.max_uploads is not None and entry.uploads >= entry.max_uploads and time.monotonic() < entry.limited_until:
            return False
        entry.uploads += count
        return True

    def get(self, blob: bytes) -> bytes | None:
        entry = self._blobs.get(blob)
        return None if entry is None else entry.data

    def gc(self, before_round: int) -> int:
        """Drop blobs of rounds older than `before_round`; returns how many were dropped."""
        old = [h for h, entry in self._blobs.items() if entry.round < before_round]
        for h in old:
            del self._blobs[h]
        return len(old)

    def __contains__(self, blob: object) -> bool:
        return blob in self._blobs

    def __len__(self) -> int:
        return len(self._blobs)

    @property
    def total_bytes(self) -> int:
        return sum(len(entry.data) for entry in self._blobs.values())

    # BlobSource
    def blob_size(self, blob: bytes) -> int | None:
        entry = self._blobs.get(blob)
        return None if entry is None else len(entry.data)

    async def read_blob(self, blob: bytes, offset: int, size: int) -> bytes:
        return self._blobs[blob].data[offset : offset + size]
