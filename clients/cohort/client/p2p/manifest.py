"""Checkpoint manifests: the file list of a directory, with each file cut into hashed chunks.

The manifest is canonical JSON; its sha256 (the manifest hash) is what the chain carries, so a
joiner can check a manifest served by any peer, and through it every chunk: each chunk is a blob
whose id is its sha256.

    {"chunk_size": 4194304, "files": [{"chunks": ["<sha256 hex>", ...], "name": "model.safetensors",
     "size": 123}], "version": 1}
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .blob_store import blob_hash

VERSION = 1
DEFAULT_CHUNK_SIZE = 4 << 20
MIN_CHUNK_SIZE = 4 << 10
MAX_CHUNK_SIZE = 64 << 20
MAX_FILES = 10_000
MAX_MANIFEST_BYTES = 16 << 20
MAX_NAME = 255


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    chunks: tuple[bytes, ...]


@dataclass(frozen=True)
class ChunkRef:
    """Where a chunk lives: file `file_index` of the manifest, from `offset`, `size` bytes."""

    hash: bytes
    file_index: int
    offset: int
    size: int


@dataclass(frozen=True)
class Manifest:
    chunk_size: int
    files: tuple[FileEntry, ...]

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def encode(self) -> bytes:
        doc = {
            "version": VERSION,
            "chunk_size": self.chunk_size,
            "files": [
                {"name": f.name, "size": f.size, "chunks": [c.hex() for c in f.chunks]}
                for f in self.files
            ],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def hash(self) -> bytes:
        return blob_hash(self.encode())

    def chunk_refs(self) -> list[ChunkRef]:
        return [
            ChunkRef(h, i, k * self.chunk_size, min(self.chunk_size, f.size - k * self.chunk_size))
            for i, f in enumerate(self.files)
            for k, h in enumerate(f.chunks)
        ]

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        """Parse and validate a manifest; raises ValueError saying what is wrong."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise ValueError(f"manifest of {len(data)} bytes exceeds {MAX_MANIFEST_BYTES}")
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"manifest is not JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError(f"manifest must be an object with version {VERSION}")
        if set(doc) != {"version", "chunk_size", "files"} or not isinstance(doc["files"], list):
            raise ValueError("manifest has keys version, chunk_size and files (a list)")
        files = []
        for item in doc["files"]:
            if not isinstance(item, dict) or set(item) != {"name", "size", "chunks"}:
                raise ValueError("each manifest file has keys name, size and chunks")
            chunks = item["chunks"]
            if not isinstance(chunks, list) or not all(_is_hex_hash(c) for c in chunks):
                raise ValueError(f"{item.get('name')!r}: chunks must be sha256 hex strings")
            files.append(
                FileEntry(item["name"], item["size"], tuple(bytes.fromhex(c) for c in chunks))
            )
        manifest = cls(doc["chunk_size"], tuple(files))
        if manifest.encode() != data:
            raise ValueError(
                "manifest is not in canonical form (sorted keys, files by name, no spaces)"
            )
        return manifest

    @classmethod
    def of_directory(cls, root: str | Path, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Manifest:
        """Hash every regular file under `root` (symlinks and other special files are refused)."""
        root = Path(root)
        if not root.is_dir():
            raise ValueError(f"{root} is not a directory")
        entries = []
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise ValueError(f"{path}: only regular files and directories can be shared")
            if path.is_file():
                name = path.relative_to(root).as_posix()
                entries.append(FileEntry(name, path.stat().st_size, _hash_chunks(path, chunk_size)))
        return cls(chunk_size, tuple(sorted(entries, key=lambda f: f.name)))


def _hash_chunks(path: Path, chunk_size: int) -> tuple[bytes, ...]:
    hashes = []
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            hashes.append(hashlib.sha256(chunk).digest())
    return tuple(hashes)


def _is_hex_hash(value: object) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def check_name(name: object) -> str:
    """A manifest file name: a relative POSIX path that stays inside the directory."""
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_NAME:
        raise ValueError(f"file name must be 1..{MAX_NAME} bytes, got {name!r:.80}")
    if "\\" in name or "\x00" in name or name.startswith("/"):
        raise ValueError(f"file name {name!r} must be a relative POSIX path")
    parts = PurePosixPath(name).parts
    if any(p in ("", ".", "..") for p in parts) or "/".join(parts) != name:
        raise ValueError(f"file name {name!r} must not contain '.', '..' or empty parts")
    if os.sep != "/" and os.sep in name:
        raise ValueError(f"file name {name!r} contains the platform separator")
    return name


def _validate(m: Manifest) -> None:
    if not isinstance(m.chunk_size, int) or not MIN_CHUNK_SIZE <= m.chunk_size <= MAX_CHUNK_SIZE:
        raise ValueError(
            f"chunk_size must be {MIN_CHUNK_SIZE}..{MAX_CHUNK_SIZE}, got {m.chunk_size!r}"
        )
    if len(m.files) > MAX_FILES:
        raise ValueError(f"a manifest lists at most {MAX_FILES} files")
    names = [check_name(f.name) for f in m.files]
    if names != sorted(set(names)):
        raise ValueError("manifest files must be sorted by name and unique")
    prefixes = {str(p) for n in names for p in PurePosixPath(n).parents}
    if clash := prefixes.intersection(names):
        raise ValueError(f"{sorted(clash)[0]!r} is both a file and a directory")
    for f in m.files:
        if not isinstance(f.size, int) or isinstance(f.size, bool) or f.size < 0:
            raise ValueError(f"{f.name!r}: size must be a non-negative int")
        expected = -(-f.size // m.chunk_size)
        if len(f.chunks) != expected:
            raise ValueError(
                f"{f.name!r}: {f.size} bytes need {expected} chunks, manifest lists {len(f.chunks)}"
            )
        if not all(isinstance(c, bytes) and len(c) == 32 for c in f.chunks):
            raise ValueError(f"{f.name!r}: chunk hashes are 32 bytes")
