"""Content-addressed blobs, tagged with the round they belong to: in memory, or in a file (a member's
committed optimizer states, as large as its model: served by range from disk, never read whole).

A blob's id is the sha256 of its bytes. Round results live for a few rounds and are then collected
(`gc`; a file blob's file is removed with it). Anything that can answer `blob_size`/`read_blob` is a `BlobSource` the blob protocol can
serve from (this store, a shared checkpoint directory).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .manifest import Manifest

HASH_BYTES = 32
# A directory (a member's committed state) a peer reads from stays this long past its last read, even once its
# round is collected: a check fetches a state's parts one after another over a slow link for longer than the
# few rounds the state is kept for. At most MAX_HELD directories are kept so: a peer that reads every state we
# serve keeps no more than that on our disk.
HOLD_SECONDS = 30.0
MAX_HELD = 8


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


@dataclass(frozen=True)
class CopyLimit:
    """How many peers we serve one of our own blobs to at first: `first` of them during its first `patience`
    seconds, so that its first fetchers serve the rest and our upload does not grow with the run; after that
    anyone still missing it may fetch it here (its first fetchers may never re-serve it). The blob server
    keeps the places (`uploads.Uploads`): a peer holds one while its copy is under way and keeps it only
    once that copy was delivered in full."""

    first: int
    published: float
    patience: float

    def open(self, now: float) -> bool:
        """Whether anyone may fetch it at `now` (its patience is over)."""
        return now >= self.published + self.patience


@dataclass
class _Entry:
    data: bytes | None  # None: the blob is the file at `path`
    round: int
    limit: CopyLimit | None = (
        None  # our own blob: its copies are limited (None: anyone may fetch it here)
    )
    path: Path | None = None
    size: int = 0
    offset: int = 0  # where the blob starts in the file at `path`
    owned: Path | None = None  # the directory the store removes once no entry reads from it

    def __post_init__(self) -> None:
        if self.data is not None:
            self.size = len(self.data)


class BlobReader:
    """One reply's hold on a blob: its bytes, or its file opened when the reply began, so collecting the blob
    meanwhile (its round ended, its file removed) never cuts a reply short."""

    def __init__(self, entry: _Entry) -> None:
        self._data, self._base = entry.data, entry.offset
        self._file = None if entry.data is not None else open(entry.path, "rb")  # closed by close()

    async def read(self, offset: int, size: int) -> bytes:
        if self._data is not None:
            return self._data[offset : offset + size]
        assert self._file is not None
        return await asyncio.to_thread(os.pread, self._file.fileno(), size, self._base + offset)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _read_range(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


class BlobStore:
    """In-memory blobs by hash; the blob protocol serves them to anyone on the allowlist."""

    def __init__(self) -> None:
        self._blobs: dict[bytes, _Entry] = {}
        self._held: dict[
            Path, float
        ] = {}  # directory -> until when a read keeps it (time.monotonic)
        self._directories: dict[
            bytes, Manifest
        ] = {}  # manifest hash -> the directory it serves, until released

    def put(
        self, data: bytes, round: int, *, own_copies: int | None = None, patience: float = 0.0
    ) -> bytes:
        """Store `data` as part of `round`; returns its hash. Storing it again keeps the later round.
        `own_copies` limits the copies served of a blob we made (see `CopyLimit`; the blob server answers
        BUSY beyond it): its author serves its first few fetchers, and they serve the rest."""
        if not isinstance(data, bytes):
            raise TypeError("blob data must be bytes")
        h = blob_hash(data)
        self.put_verified(h, data, round, own_copies=own_copies, patience=patience)
        return h

    def put_verified(self, blob: bytes, data: bytes, round: int, *, own_copies: int | None = None,
                     patience: float = 0.0) -> None:  # fmt: skip
        """Store bytes whose hash the caller has already checked (after a fetch)."""
        check_hash(blob)
        if not isinstance(round, int) or round < 0:
            raise ValueError(f"round must be a non-negative int, got {round!r}")
        if own_copies is not None and (own_copies < 1 or patience < 0):
            raise ValueError("own_copies must be >= 1 and patience >= 0")
        entry = self._blobs.get(blob)
        if entry is None:
            limit = (
                None if own_copies is None else CopyLimit(own_copies, time.monotonic(), patience)
            )
            self._blobs[blob] = _Entry(data, round, limit)
        else:
            entry.round = max(entry.round, round)

    def put_directory(self, root: Path, manifest: Manifest, round: int) -> bytes:
        """Serve the directory `root` as `manifest` describes it (whose part hashes the caller computed as it
        wrote the files): the manifest under its hash and every part under its own, read from disk on demand,
        as part of `round`. The store owns the directory from now on and removes it once its round is
        collected. Returns the manifest hash."""
        if not isinstance(round, int) or round < 0:
            raise ValueError(f"round must be a non-negative int, got {round!r}")
        h = blob_hash(data := manifest.encode())
        self.put_verified(h, data, round)
        if (
            self._blobs[h].owned is None
        ):  # a read of the manifest holds the directory, as one of a part does
            self._blobs[h].owned = root
        for ref in manifest.chunk_refs():
            entry = self._blobs.get(ref.hash)
            if entry is not None and (entry.data is not None or entry.round > round):
                entry.round = max(
                    entry.round, round
                )  # held in memory, or by a directory that outlives this one
                continue
            # a part equal to one an older directory holds is served from this one from now on: whoever
            # removes the older directory (its round collected, or its owner pruning it) cuts nothing
            self._blobs[ref.hash] = _Entry(None, round, path=root / manifest.files[ref.file_index].name,
                                           size=ref.size, offset=ref.offset, owned=root)  # fmt: skip
        self._directories[h] = manifest
        held = {e.owned for e in self._blobs.values()}
        if root not in held:
            shutil.rmtree(root, ignore_errors=True)  # every part was held already
        return h

    def release_directory(self, manifest_hash: bytes) -> None:
        """Nobody will ask for the directory served under `manifest_hash` any more (e.g. a committed state no
        check can still read): its manifest and parts go at the next `gc`, whatever their round, but for a
        check reading it now (HOLD_SECONDS) and the parts another directory still served lists too."""
        if self._directories.pop(manifest_hash, None) is None:
            return  # not a directory, or released already
        entry = self._blobs.get(manifest_hash)
        if entry is None or entry.owned is None:
            return
        listed = {ref.hash for m in self._directories.values() for ref in m.chunk_refs()}
        for h, e in self._blobs.items():
            if e.owned == entry.owned and h not in listed:
                e.round = -1

    def in_background(self, blob: bytes) -> bool:
        """Whether serving `blob` yields to the rest of its connection: the parts of a directory (a member's
        committed states, read from disk for checks) do; results, held in memory, go first."""
        entry = self._blobs.get(blob)
        return entry is not None and entry.data is None

    def copy_limit(self, blob: bytes) -> CopyLimit | None:
        """The limit on the copies of `blob` served (None: anyone may fetch it here)."""
        entry = self._blobs.get(blob)
        return None if entry is None else entry.limit

    def get(self, blob: bytes) -> bytes | None:
        """The blob's bytes (a file blob is read whole: for the rare caller that needs one in memory)."""
        entry = self._blobs.get(blob)
        if entry is None:
            return None
        if entry.data is None:
            assert entry.path is not None
            return _read_range(entry.path, entry.offset, entry.size)
        return entry.data

    def gc(self, before_round: int) -> int:
        """Drop blobs of rounds older than `before_round` but those of a directory read in the last HOLD_SECONDS
        (the MAX_HELD read last); returns how many were dropped."""
        now = time.monotonic()
        recent = sorted(
            ((until, root) for root, until in self._held.items() if until > now), reverse=True
        )
        self._held = {root: until for until, root in recent[:MAX_HELD]}
        old = [
            h
            for h, entry in self._blobs.items()
            if entry.round < before_round and (entry.owned is None or entry.owned not in self._held)
        ]
        released = {self._blobs.pop(h).owned for h in old} - {None}
        for h in [h for h in self._directories if h not in self._blobs]:
            del self._directories[h]
        for root in released - {entry.owned for entry in self._blobs.values()}:
            assert root is not None
            shutil.rmtree(
                root, ignore_errors=True
            )  # a reader that has a file open keeps reading (POSIX)
        return len(old)

    def __contains__(self, blob: object) -> bool:
        return blob in self._blobs

    def __len__(self) -> int:
        return len(self._blobs)

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self._blobs.values())

    # BlobSource
    def blob_size(self, blob: bytes) -> int | None:
        entry = self._blobs.get(blob)
        return None if entry is None else entry.size

    def open_reader(self, blob: bytes) -> BlobReader | None:
        """A hold on `blob` for one reply (None: not held, or its file is gone already)."""
        entry = self._blobs.get(blob)
        if entry is None:
            return None
        try:
            reader = BlobReader(entry)
        except FileNotFoundError:
            return None
        if entry.owned is not None:  # a check is reading this state: keep it a while (HOLD_SECONDS)
            self._held[entry.owned] = time.monotonic() + HOLD_SECONDS
        return reader

    async def read_blob(self, blob: bytes, offset: int, size: int) -> bytes:
        entry = self._blobs[blob]
        if entry.data is None:
            assert entry.path is not None
            return await asyncio.to_thread(_read_range, entry.path, entry.offset + offset, size)
        return entry.data[offset : offset + size]
