"""Directory sharing for checkpoints: serve a directory as blobs, download one from several peers.

A shared directory answers the blob protocol for its manifest (by manifest hash) and for each of its
chunks (by chunk hash), reading chunks from disk on demand. A download fetches the manifest, checks
it against the manifest hash the caller trusts (from the chain), then fetches chunks in parallel,
spreading them over the providers (each chunk starts at a different peer and falls back to the
others), verifies each chunk, and reports progress.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .blob_fetch import BlobFetcher
from .blob_store import check_hash
from .identity import NodeId
from .manifest import MAX_MANIFEST_BYTES, ChunkRef, Manifest
from .transport import PeerAddress

PARTIAL_SUFFIX = ".partial"


class DirectoryShare:
    """A directory on disk served as blobs (a `BlobSource`); the files must not change meanwhile."""

    def __init__(self, root: str | Path, manifest: Manifest) -> None:
        self.root = Path(root)
        self.manifest = manifest
        self._manifest_bytes = manifest.encode()
        self.manifest_hash = manifest.hash()
        self._chunks: dict[bytes, ChunkRef] = {}
        for ref in manifest.chunk_refs():
            self._chunks.setdefault(ref.hash, ref)

    @classmethod
    def scan(cls, root: str | Path, chunk_size: int | None = None) -> DirectoryShare:
        """Hash the directory and share it."""
        manifest = (
            Manifest.of_directory(root)
            if chunk_size is None
            else Manifest.of_directory(root, chunk_size)
        )
        return cls(root, manifest)

    @property
    def gone(self) -> bool:
        """Its directory was deleted (a pruned checkpoint): it holds nothing any more."""
        return not self.root.is_dir()

    def blob_size(self, blob: bytes) -> int | None:
        if blob == self.manifest_hash:
            size = len(self._manifest_bytes)
        elif (ref := self._chunks.get(blob)) is not None:
            size = ref.size
        else:
            return None
        # chunks repeat across checkpoints (config.json, the tokenizer): a pruned one must not answer for
        # them, or the blob server picks it over the newer share that still has the file
        return None if self.gone else size

    async def read_blob(self, blob: bytes, offset: int, size: int) -> bytes:
        if blob == self.manifest_hash:
            return self._manifest_bytes[offset : offset + size]
        ref = self._chunks[blob]
        path = self.root / self.manifest.files[ref.file_index].name
        return await asyncio.to_thread(_read_at, path, ref.offset + offset, size)


@dataclass
class DownloadProgress:
    """Where a directory download stands; passed to the progress callback after every chunk."""

    bytes_total: int
    chunks_total: int
    bytes_done: int = 0
    chunks_done: int = 0
    bytes_by_peer: dict[NodeId, int] = field(default_factory=dict)


async def download_directory(
    fetcher: BlobFetcher,
    manifest_hash: bytes,
    providers: Sequence[PeerAddress],
    dest: str | Path,
    *,
    parallel: int = 8,
    progress: Callable[[DownloadProgress], None] | None = None,
) -> Manifest:
    """Download the directory whose manifest hashes to `manifest_hash` into `dest` (new or empty).

    Files appear under their final names only once complete; on failure `dest` holds only
    `*.partial` files. Raises BlobFetchError if some chunk cannot be fetched from any provider.
    """
    check_hash(manifest_hash)
    if parallel < 1:
        raise ValueError("parallel must be >= 1")
    if not providers:
        raise ValueError("no providers to download from")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"{dest} exists and is not an empty directory")
    raw = await fetcher.fetch(manifest_hash, providers, max_size=MAX_MANIFEST_BYTES)
    manifest = Manifest.decode(raw)  # bytes already match the trusted hash
    refs = manifest.chunk_refs()
    state = DownloadProgress(manifest.total_bytes, len(refs))
    dest.mkdir(parents=True, exist_ok=True)
    partials = [dest / (f.name + PARTIAL_SUFFIX) for f in manifest.files]
    for path, f in zip(partials, manifest.files, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            out.truncate(f.size)

    queue: asyncio.Queue[tuple[int, ChunkRef]] = asyncio.Queue()
    for k, ref in enumerate(refs):
        queue.put_nowait((k, ref))

    async def worker() -> None:
        while not queue.empty():
            k, ref = queue.get_nowait()
            start = k % len(providers)  # spread chunks over peers; the rest are fallbacks
            order = [*providers[start:], *providers[:start]]
            got = await fetcher.fetch_detailed(ref.hash, order, max_size=ref.size)
            if len(got.data) != ref.size:
                raise ValueError(
                    f"chunk {ref.hash.hex()[:16]} has {len(got.data)} bytes, manifest says {ref.size}"
                )
            await asyncio.to_thread(_write_at, partials[ref.file_index], ref.offset, got.data)
            state.bytes_done += ref.size
            state.chunks_done += 1
            state.bytes_by_peer[got.provider] = state.bytes_by_peer.get(got.provider, 0) + ref.size
            if progress is not None:
                progress(state)

    workers = [asyncio.create_task(worker()) for _ in range(min(parallel, max(1, len(refs))))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    for path, f in zip(partials, manifest.files, strict=True):
        os.replace(path, dest / f.name)
    return manifest


def _read_at(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        data = os.pread(f.fileno(), size, offset)
    if len(data) != size:
        raise OSError(f"{path} is shorter than its manifest says (changed while shared?)")
    return data


def _write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        os.pwrite(f.fileno(), data, offset)
