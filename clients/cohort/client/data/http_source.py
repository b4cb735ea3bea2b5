"""Prepared data read from any static HTTP server with range requests.

The reader fetches DIR/manifest.json (checked against a pinned manifest hash when one is given),
then reads the index and the shards in manifest chunks: each chunk is one range request, verified
against its sha256 before use and kept in a bounded LRU cache. A failed request is retried with
backoff; when every attempt fails the read raises DataError naming the URL.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict

import httpx2
import numpy as np

from ..p2p.manifest import MAX_MANIFEST_BYTES, Manifest
from .shards import (
    DTYPES,
    INDEX_FILE,
    MANIFEST_FILE,
    TOKENS_DIR,
    DataError,
    DataIndex,
    read_across_shards,
)

log = logging.getLogger(__name__)


class HttpShards:
    """A TokenSource over HTTP: `url` is the prepared directory (…/DIR, holding manifest.json)."""

    def __init__(
        self,
        url: str,
        expected_hash: bytes | None = None,
        *,
        timeout: float = 10.0,
        attempts: int = 4,
        backoff: float = 0.25,
        cache_bytes: int = 64 << 20,
    ) -> None:
        if attempts < 1 or timeout <= 0 or cache_bytes < 0:
            raise ValueError("attempts >= 1, timeout > 0 and cache_bytes >= 0 are required")
        self.url = url.rstrip("/")
        self.attempts = attempts
        self.backoff = backoff
        self.cache_bytes = cache_bytes
        self._client = httpx2.Client(timeout=timeout, follow_redirects=False)
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._cached = 0
        self.requests = 0
        try:
            raw = self._get(MANIFEST_FILE, None, MAX_MANIFEST_BYTES)
            try:
                self.manifest = Manifest.decode(raw)
            except ValueError as e:
                raise DataError(f"{self.url}/{MANIFEST_FILE}: {e}") from None
            if expected_hash is not None and self.manifest.hash() != expected_hash:
                raise DataError(
                    f"{self.url}: manifest hash is not the expected {expected_hash.hex()[:16]}…"
                )
            self._files = {f.name: k for k, f in enumerate(self.manifest.files)}
            index_file = self._file_index(INDEX_FILE)
            raw_index = self._read_file(index_file, 0, self.manifest.files[index_file].size)
            self.index = DataIndex.decode(raw_index, f"{self.url}/{TOKENS_DIR}/{INDEX_FILE}")
            self._dtype = DTYPES[self.index.dtype]
            self._shards = [self._file_index(s.name) for s in self.index.shards]
            for s, k in zip(self.index.shards, self._shards, strict=True):
                if self.manifest.files[k].size != s.tokens * self._dtype.itemsize:
                    raise DataError(f"{self.url}: shard {s.name} size disagrees with the index")
        except BaseException:
            self._client.close()
            raise
        self._starts = np.cumsum([0] + [s.tokens for s in self.index.shards])
        self.n_tokens = self.index.n_tokens
        self.vocab_size = self.index.vocab_size
        self.heldout_fraction = self.index.heldout_fraction

    def read(self, offset: int, count: int) -> np.ndarray:
        item = self._dtype.itemsize

        def read_shard(k: int, at: int, n: int) -> np.ndarray:
            raw = self._read_file(self._shards[k], at * item, n * item)
            return np.frombuffer(raw, dtype=self._dtype)

        return read_across_shards(self._starts, offset, count, read_shard)

    def close(self) -> None:
        self._client.close()

    def _file_index(self, name: str) -> int:
        k = self._files.get(name)
        if k is None:
            raise DataError(f"{self.url}: the manifest lists no {TOKENS_DIR}/{name}")
        return k

    def _read_file(self, file: int, offset: int, size: int) -> bytes:
        """Bytes [offset, offset+size) of manifest file `file`, from verified chunks."""
        chunk = self.manifest.chunk_size
        out = bytearray()
        for c in range(offset // chunk, -(-(offset + size) // chunk) if size else offset // chunk):
            data = self._chunk(file, c)
            lo = max(offset - c * chunk, 0)
            hi = min(offset + size - c * chunk, len(data))
            out += data[lo:hi]
        return bytes(out)

    def _chunk(self, file: int, c: int) -> bytes:
        key = (file, c)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        entry = self.manifest.files[file]
        start = c * self.manifest.chunk_size
        size = min(self.manifest.chunk_size, entry.size - start)
        data = self._get(f"{TOKENS_DIR}/{entry.name}", (start, size), size)
        if hashlib.sha256(data).digest() != entry.chunks[c]:
            raise DataError(
                f"{self.url}/{TOKENS_DIR}/{entry.name}: bytes at {start} do not match the manifest"
            )
        with self._lock:
            self._cache[key] = data
            self._cached += len(data)
            while self._cached > self.cache_bytes and self._cache:
                _, old = self._cache.popitem(last=False)
                self._cached -= len(old)
        return data

    def _get(self, name: str, byte_range: tuple[int, int] | None, limit: int) -> bytes:
        url = f"{self.url}/{name}"
        headers = {}
        if byte_range is not None:
            start, size = byte_range
            headers["Range"] = f"bytes={start}-{start + size - 1}"
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            self.requests += 1
            try:
                with self._client.stream("GET", url, headers=headers) as response:
                    if response.status_code in (404, 410, 416):
                        raise DataError(f"{url}: HTTP {response.status_code}")
                    if response.status_code >= 400:
                        last = f"HTTP {response.status_code}"
                        continue
                    if byte_range is not None and response.status_code != 206:
                        raise DataError(
                            f"{url}: the server ignores range requests (HTTP {response.status_code})"
                        )
                    body = bytearray()
                    for piece in response.iter_bytes():
                        body += piece
                        if len(body) > limit:
                            raise DataError(f"{url}: more than the {limit} bytes asked for")
                    if byte_range is not None and len(body) != byte_range[1]:
                        last = f"short body ({len(body)} of {byte_range[1]} bytes)"
                        continue
                    return bytes(body)
            except httpx2.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
                log.info("GET %s failed (attempt %d): %s", url, attempt + 1, last)
        raise DataError(f"{url}: no answer after {self.attempts} attempts ({last})")
