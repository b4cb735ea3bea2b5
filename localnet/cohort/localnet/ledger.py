"""The ledger directory: a snapshot plus an append-only log, fsync'd before the RPC answers.

Files are `snapshot-<gen>.bin` and `log-<gen>.bin`; the state is the newest complete snapshot with every log of
the same or a later generation replayed on top. Both are sequences of framed records:

    b"CL" | u32 payload length | u32 crc32(payload) | payload (compact JSON)

Appends are group-committed: records from concurrent requests share one write + fdatasync on a worker
thread, and each caller's future resolves once its record is on disk. When the log outgrows the threshold a
new snapshot is written in the background and the logs it covers are deleted. A torn or corrupt tail (a
crash mid-write) is cut back to the last complete record on open, and the caller is told how much was lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import jsonio

log = logging.getLogger("cohort.localnet.ledger")

MAGIC = b"CL"
_FRAME = struct.Struct("<2sII")
MAX_RECORD_BYTES = 256 * 1024 * 1024
COMPACT_LOG_BYTES = 64 * 1024 * 1024
_NAME = re.compile(r"^(snapshot|log)-(\d{8})\.bin$")


class LedgerCorrupt(Exception):
    """A snapshot (written atomically, so never torn) failed its checksum: the disk or the files were damaged."""


def frame(payload: dict[str, Any]) -> bytes:
    body = jsonio.dumps(payload)
    return _FRAME.pack(MAGIC, len(body), zlib.crc32(body)) + body


def read_frames(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The complete, valid records at the start of `data`, and the byte offset where they end."""
    out: list[dict[str, Any]] = []
    pos = 0
    while pos + _FRAME.size <= len(data):
        magic, length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if magic != MAGIC or length > MAX_RECORD_BYTES or end > len(data):
            break
        body = data[pos + _FRAME.size : end]
        if zlib.crc32(body) != crc:
            break
        try:
            out.append(jsonio.loads(body))
        except ValueError:
            break
        pos = end
    return out, pos


@dataclass
class Recovered:
    """What `open_ledger` found on disk: the records to rebuild from, in order, and what was cut off."""

    records: list[dict[str, Any]] = field(default_factory=list)
    generation: int = 0
    dropped_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def _files(directory: Path) -> dict[str, dict[int, Path]]:
    found: dict[str, dict[int, Path]] = {"snapshot": {}, "log": {}}
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match:
            found[match[1]][int(match[2])] = path
    return found


def _path(directory: Path, kind: str, generation: int) -> Path:
    return directory / f"{kind}-{generation:08d}.bin"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover(directory: Path) -> Recovered:
    """Read the newest snapshot and the logs after it, cutting a torn log tail back to its last full record."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.tmp"):
        stale.unlink()  # a snapshot that never finished
    files = _files(directory)
    result = Recovered()
    if files["snapshot"]:
        generation = max(files["snapshot"])
        data = files["snapshot"][generation].read_bytes()
        records, end = read_frames(data)
        if end != len(data) or not records or records[0].get("k") != "snapshot":
            raise LedgerCorrupt(
                f"snapshot {files['snapshot'][generation].name} is damaged at byte {end} of {len(data)}; "
                "restore it from a backup or start over with --reset"
            )
        result.records.extend(records)
        result.generation = generation
    for generation in sorted(g for g in files["log"] if g >= result.generation):
        path = files["log"][generation]
        data = path.read_bytes()
        records, end = read_frames(data)
        result.records.extend(records)
        if end != len(data):
            dropped = len(data) - end
            result.dropped_bytes += dropped
            result.notes.append(
                f"{path.name}: dropped an incomplete or corrupt tail of {dropped} bytes after "
                f"{len(records)} complete records (a crash during a write); recovered to the last complete one"
            )
            with open(path, "r+b") as f:
                f.truncate(end)
                os.fsync(f.fileno())
        result.generation = max(result.generation, generation)
    return result


class Ledger:
    """Appends records durably; writes snapshots. Owned by one event loop."""

    def __init__(
        self, directory: Path, generation: int, compact_bytes: int = COMPACT_LOG_BYTES
    ) -> None:
        self.directory = directory
        self.generation = generation
        self.compact_bytes = compact_bytes
        self._fd = os.open(
            _path(directory, "log", generation), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        self._log_bytes = os.fstat(self._fd).st_size
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._capture: Callable[[], Iterable[dict[str, Any]]] | None = None
        self.records_written = 0

    def on_compact(self, capture: Callable[[], Iterable[dict[str, Any]]]) -> None:
        """Set how to capture the full state (the snapshot's records) when the log grows too large."""
        self._capture = capture

    def append(self, payload: dict[str, Any]) -> asyncio.Future[None]:
        """Queue a record; the future resolves when it is on disk (fdatasync'd)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((frame(payload), future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            blob = b"".join(data for data, _ in batch)
            try:
                await loop.run_in_executor(None, self._write, self._fd, blob)
            except OSError as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self._log_bytes += len(blob)
            self.records_written += len(batch)
            for _, future in batch:
                if not future.done():
                    future.set_result(None)
            if self._capture is not None and self._log_bytes > self.compact_bytes:
                await self.snapshot(self._capture())

    @staticmethod
    def _write(fd: int, blob: bytes) -> None:
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)

    async def idle(self) -> None:
        """Wait until every queued record is written (and any snapshot it triggered is finished)."""
        while self._flusher is not None and not self._flusher.done():
            await self._flusher

    async def snapshot_now(self) -> None:
        """Write a snapshot of the current state (e.g. on a clean shutdown, so restarts replay nothing)."""
        if self._capture is None:
            raise RuntimeError("on_compact() was not called: nothing to capture")
        await self.idle()
        await self.snapshot(self._capture())

    async def snapshot(self, records: Iterable[dict[str, Any]]) -> None:
        """Start a new generation: later appends go to a new log; the snapshot covers everything before.

        Crash-safe at every step: until the snapshot is renamed into place, recovery uses the previous
        snapshot plus both logs; afterwards, the new snapshot plus the new log.
        """
        records = list(records)
        generation = self.generation + 1
        old_fd = self._fd
        self._fd = os.open(
            _path(self.directory, "log", generation), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        self._log_bytes = 0
        self.generation = generation
        os.close(old_fd)
        await asyncio.get_running_loop().run_in_executor(
            None, self._write_snapshot, generation, records
        )

    def _write_snapshot(self, generation: int, records: list[dict[str, Any]]) -> None:
        final = _path(self.directory, "snapshot", generation)
        tmp = final.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for payload in records:
                f.write(frame(payload))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.directory)
        files = _files(self.directory)
        for kind in ("snapshot", "log"):
            for old, path in files[kind].items():
                if old < generation:
                    path.unlink()

    async def close(self) -> None:
        await self.idle()
        os.close(self._fd)


def reset(directory: Path) -> None:
    """Delete a ledger's files (only ours: anything else in the directory is left alone)."""
    if not directory.exists():
        return
    for path in directory.iterdir():
        if _NAME.match(path.name) or path.suffix == ".tmp":
            path.unlink()


def iter_chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
