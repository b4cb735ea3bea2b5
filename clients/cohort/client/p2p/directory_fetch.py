"""Fetching a shared directory (a checkpoint) from several holders, in hashed parts, resumable.

The manifest (fetched by the hash the chain carries, so its bytes are checked) lists every file and
the sha256 of each of its parts (`Manifest.chunk_size`, 4 MiB). Parts are fetched side by side, each
starting at a different holder and falling back to the others, and each is checked against its hash
before it is written; a holder that served bad bytes or failed goes to the back of the line for the
parts after it. Files grow as `<name>.partial` in a work directory, and a journal beside it lists
the parts already written: a fetch that stops (a holder gone, the client restarted) leaves both, and
the next fetch of the same manifest re-hashes the journal's parts (never trusting it) and fetches
only the rest. Memory: the parts in flight (`parallel` x 4 MiB).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .blob_fetch import BlobFetcher, BlobFetchError
from .blob_store import check_hash
from .identity import NodeId
from .manifest import MAX_MANIFEST_BYTES, ChunkRef, Manifest
from .transport import PeerAddress

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
JOURNAL_SUFFIX = ".parts"


@dataclass
class FetchProgress:
    """Where a checkpoint fetch stands; passed to the progress callback after every part."""

    manifest_hash: bytes
    bytes_total: int
    parts_total: int
    bytes_done: int = 0  # resumed or fetched, all verified
    parts_done: int = 0
    bytes_resumed: int = 0  # already on disk from an earlier fetch
    bytes_by_peer: dict[NodeId, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 1.0

    @property
    def rate(self) -> float:
        """Bytes per second fetched so far (what was resumed from disk not counted)."""
        return (self.bytes_done - self.bytes_resumed) / max(time.monotonic() - self.started, 1e-3)

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate so far; None before any byte arrived."""
        left = self.bytes_total - self.bytes_done
        return left / self.rate if left > 0 and self.rate > 0 else (0.0 if left <= 0 else None)

    def line(self) -> str:
        """One human line: done, total, rate, ETA, holders."""
        resumed = f", {self.bytes_resumed / 2**20:.0f} MiB resumed" if self.bytes_resumed else ""
        eta = f", ETA {self.eta:.0f} s" if self.eta is not None else ""
        return (
            f"checkpoint {self.manifest_hash.hex()[:12]}: {self.bytes_done / 2**20:.0f}/"
            f"{self.bytes_total / 2**20:.0f} MiB ({self.fraction:.0%}), {self.parts_done}/"
            f"{self.parts_total} parts, {self.rate / 2**20:.1f} MiB/s{eta} from {len(self.bytes_by_peer)} "
            f"holder(s){resumed}"
        )


FetchProgressCallback = Callable[[FetchProgress], None]


def log_progress(every: float = 0.1) -> FetchProgressCallback:
    """A progress callback that logs a line at each `every` of the bytes, and at the end."""
    shown = -1.0

    def report(p: FetchProgress) -> None:
        nonlocal shown
        if p.fraction >= 1.0 or p.fraction - shown >= every:
            shown = p.fraction
            log.info("%s", p.line())

    return report


def journal_path(work: Path) -> Path:
    return work.with_name(work.name + JOURNAL_SUFFIX)


def discard(work: Path) -> None:
    """Forget a fetch's work directory and journal."""
    shutil.rmtree(work, ignore_errors=True)
    journal_path(work).unlink(missing_ok=True)


async def fetch_parts(
    fetcher: BlobFetcher,
    manifest_hash: bytes,
    providers: Sequence[PeerAddress],
    work: str | Path,
    *,
    parallel: int = 8,
    progress: FetchProgressCallback | None = None,
) -> Manifest:
    """Fetch the directory whose manifest hashes to `manifest_hash` into `work`, resuming what an
    earlier fetch of it left there. On return `work` holds exactly the manifest's files, each part
    checked against its hash; on failure (BlobFetchError when some part came from no holder) it keeps
    the verified parts for the next try."""
    check_hash(manifest_hash)
    if parallel < 1:
        raise ValueError("parallel must be >= 1")
    if not providers:
        raise ValueError("no providers to fetch from")
    work = Path(work)
    raw = await fetcher.fetch(manifest_hash, providers, max_size=MAX_MANIFEST_BYTES)
    manifest = Manifest.decode(raw)  # bytes already match the trusted hash
    refs = manifest.chunk_refs()
    state = FetchProgress(manifest_hash, manifest.total_bytes, len(refs))
    done = await asyncio.to_thread(_prepare, work, manifest, manifest_hash)
    for k in done:
        state.bytes_done += refs[k].size
        state.parts_done += 1
    state.bytes_resumed = state.bytes_done
    if progress is not None:
        progress(state)
    partials = [work / (f.name + PARTIAL_SUFFIX) for f in manifest.files]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for k in range(len(refs)):
        if k not in done:
            queue.put_nowait(k)
    strikes: dict[NodeId, int] = {}  # failed or bad answers per holder, to ask it last
    failures: list[BlobFetchError] = []
    journal = journal_path(work)

    async def worker() -> None:
        # a part no holder delivered does not stop the others (they are kept for the resume),
        # but `parallel` such parts do: the holders are gone, waiting out each part is no use
        while not queue.empty() and len(failures) < parallel:
            k = queue.get_nowait()
            ref = refs[k]
            start = k % len(providers)  # spread parts over holders; the rest are fallbacks
            order = sorted(
                [*providers[start:], *providers[:start]], key=lambda p: strikes.get(p.node_id, 0)
            )
            try:
                got = await fetcher.fetch_detailed(ref.hash, order, max_size=ref.size)
            except BlobFetchError as e:
                failures.append(e)
                for attempt in e.attempts:
                    strikes[attempt.provider] = strikes.get(attempt.provider, 0) + 1
                continue
            for attempt in got.failed:
                strikes[attempt.provider] = strikes.get(attempt.provider, 0) + 1
            if len(got.data) != ref.size:
                raise ValueError(
                    f"part {ref.hash.hex()[:16]} has {len(got.data)} bytes, manifest says {ref.size}"
                )
            await asyncio.to_thread(
                _write_part, partials[ref.file_index], ref, got.data, journal, k
            )
            state.bytes_done += ref.size
            state.parts_done += 1
            state.bytes_by_peer[got.provider] = state.bytes_by_peer.get(got.provider, 0) + ref.size
            if progress is not None:
                progress(state)

    workers = [asyncio.create_task(worker()) for _ in range(min(parallel, max(1, queue.qsize())))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    if failures:
        raise failures[0]
    await asyncio.to_thread(_finish, work, manifest, partials)
    return manifest


def _prepare(work: Path, manifest: Manifest, manifest_hash: bytes) -> set[int]:
    """Make `work` hold a `.partial` of every file at its full size, nothing else; return the parts
    (indexes into `chunk_refs()`) an earlier fetch of this manifest wrote that still hash right."""
    journal = journal_path(work)
    claimed: set[int] = set()
    try:
        lines = journal.read_text().split()
        if lines and lines[0] == manifest_hash.hex():
            claimed = {int(x) for x in lines[1:] if x.isdigit()}
    except (OSError, UnicodeDecodeError):
        pass
    if not claimed:
        discard(work)  # another manifest's leftovers, or nothing worth keeping
    partials = {f.name + PARTIAL_SUFFIX: f for f in manifest.files}
    work.mkdir(parents=True, exist_ok=True)
    for path in sorted(work.rglob("*"), reverse=True):  # children before their directories
        name = path.relative_to(work).as_posix()
        if path.is_symlink() or (path.is_file() and name not in partials):
            path.unlink()
        elif path.is_dir() and not any(p.startswith(name + "/") for p in partials):
            shutil.rmtree(path)
    for name, f in partials.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as out:
            out.truncate(f.size)
    refs = manifest.chunk_refs()
    done = {
        k
        for k in claimed
        if k < len(refs) and _holds(work / partial_name(manifest, refs[k]), refs[k])
    }
    with open(journal, "w") as out:  # only what still verifies, and under this manifest
        out.write(manifest_hash.hex() + "\n" + "".join(f"{k}\n" for k in sorted(done)))
    return done


def partial_name(manifest: Manifest, ref: ChunkRef) -> str:
    return manifest.files[ref.file_index].name + PARTIAL_SUFFIX


def _holds(path: Path, ref: ChunkRef) -> bool:
    """Whether `path` has the part's bytes at its offset (its hash, not the journal's word)."""
    with open(path, "rb") as f:
        data = os.pread(f.fileno(), ref.size, ref.offset)
    return len(data) == ref.size and hashlib.sha256(data).digest() == ref.hash


def _write_part(path: Path, ref: ChunkRef, data: bytes, journal: Path, k: int) -> None:
    with open(path, "r+b") as f:
        os.pwrite(f.fileno(), data, ref.offset)
    with open(
        journal, "a"
    ) as out:  # after the bytes: a part in the journal was written (or is re-hashed)
        out.write(f"{k}\n")


def _finish(work: Path, manifest: Manifest, partials: list[Path]) -> None:
    """Every part is in: the files take their names, and are on disk before the caller renames."""
    for path, f in zip(partials, manifest.files, strict=True):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(path, work / f.name)
    journal_path(work).unlink(missing_ok=True)
