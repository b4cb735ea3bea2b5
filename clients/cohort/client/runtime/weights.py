"""This client's checkpoints: the epoch-end weights it writes (in the background) and serves to joiners, and
the checkpoint it fetches (from peers or a hub) when it lacks an epoch's starting weights.

Each client has a directory of its own, keyed by its node id under the run's: any number of clients of one
user on one machine never share (or clean up) each other's files.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoint import (
    CheckpointInfo,
    CheckpointWriter,
    FromHub,
    FromPeers,
    FromPeersThenHub,
    fetch_checkpoint,
)
from ..p2p import FetchProgress, FetchProgressCallback, P2PNode, PeerAddress
from .disk import cache_root
from .worker import ModelWorker

if TYPE_CHECKING:
    from .replica import Replica

KEEP_LAST = 2  # epoch-end checkpoints kept on disk
PROGRESS_EVERY = 2.0  # seconds between a checkpoint fetch's progress events


def progress_events(events: Any, every: float = PROGRESS_EVERY) -> FetchProgressCallback:
    """A fetch progress callback that emits `checkpoint_progress` (bytes, rate, ETA) at most every `every`
    seconds and at the end, and keeps the console's status line on it."""
    last = -every

    def report(p: FetchProgress) -> None:
        nonlocal last
        now = time.monotonic()
        if p.fraction < 1.0 and now - last < every:
            return
        last = now
        eta = round(p.eta, 1) if p.eta is not None else None
        events.emit("checkpoint_progress", manifest=p.manifest_hash.hex()[:16], bytes_done=p.bytes_done,
                    bytes_total=p.bytes_total, parts_done=p.parts_done, parts_total=p.parts_total,
                    rate=round(p.rate), eta=eta, holders=len(p.bytes_by_peer))  # fmt: skip
        events.status(model=f"checkpoint {p.fraction:.0%} of {p.bytes_total / 2**20:.0f} MiB, "
                            f"{p.rate / 2**20:.1f} MiB/s" + (f", ETA {eta:.0f} s" if eta is not None else ""))  # fmt: skip

    return report


def default_root(run_address: str, node_id: str) -> Path:
    return cache_root() / "checkpoints" / run_address / node_id


class CheckpointShelf:
    def __init__(self, root: Path, node: P2PNode, worker: ModelWorker) -> None:
        self.root, self.node, self.worker = root, node, worker
        self.writer: CheckpointWriter | None = None
        self.saved: CheckpointInfo | None = None  # our weights at the last epoch end
        self.progress: FetchProgressCallback | None = (
            None  # a joiner's fetch progress (the client's events)
        )

    async def save(self, replica: Replica, *, run_id: str, step: int, epoch: int) -> CheckpointInfo:
        """Write the replica's weights as a Hugging Face checkpoint and serve it. It starts on the model worker
        (after every step asked before, before any asked after): a copy of the weights whose writing, hashing
        and pruning of old ones happen on the writer's own thread, or a sharded member's write in place."""
        if self.writer is None:
            self.writer = CheckpointWriter(self.root, keep_last=KEEP_LAST)
        writer = self.writer
        future = await self.worker.run(
            lambda: replica.checkpoint(writer, run_id=run_id, step=step, epoch=epoch)
        )
        info = await asyncio.wrap_future(future)
        self.saved = info
        await self.node.share_directory(info.path)
        return info

    async def fetch(self, manifest_hash: bytes, peers: Iterable[PeerAddress], *,
                    hub: tuple[str, str] | None = None) -> Path:  # fmt: skip
        """The checkpoint with `manifest_hash`, from the peers that hold it (then from the Hub `hub` =
        (repo, revision) names, when given), verified (CheckpointError otherwise); afterwards we serve it too.
        Progress is a `checkpoint_progress` event (bytes, rate, ETA) every few seconds and at the end."""
        dest = self.root / f"joined-{manifest_hash.hex()[:16]}"
        source = FromPeers(self.node, tuple(peers))
        if hub is not None:
            repo, revision = hub
            source = FromPeersThenHub(
                source, FromHub(repo, revision or None, token=os.environ.get("HF_TOKEN"))
            )
        path = await fetch_checkpoint(source, manifest_hash, dest, progress=self.progress)
        assert path is not None
        return path

    async def fetch_hub(self, repo: str, revision: str, manifest_hash: bytes) -> Path:
        """A run's starting checkpoint from a Hugging Face repo (or a local directory), verified."""
        source = FromHub(repo, revision or None, token=os.environ.get("HF_TOKEN"))
        path = await fetch_checkpoint(
            source, manifest_hash, self.root / f"hub-{manifest_hash.hex()[:16]}"
        )
        assert path is not None
        return path
