"""Directory sharing for checkpoints: serve a directory as blobs (fetching one: directory_fetch.py).

A shared directory answers the blob protocol for its manifest (by manifest hash) and for each of its
chunks (by chunk hash), reading chunks from disk on demand.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from .manifest import ChunkRef, Manifest


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


def _read_at(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        data = os.pread(f.fileno(), size, offset)
    if len(data) != size:
        raise OSError(f"{path} is shorter than its manifest says (changed while shared?)")
    return data
