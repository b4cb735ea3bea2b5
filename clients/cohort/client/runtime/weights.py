"""This client's checkpoints: the epoch-end weights it writes (in the background) and serves to joiners, and
the checkpoint it fetches (from peers or a hub) when it lacks an epoch's starting weights.

Each client has a directory of its own, keyed by its node id under the run's: any number of clients of one
user on one machine never share (or clean up) each other's files.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path

from ..checkpoint import CheckpointInfo, CheckpointWriter, FromHub, FromPeers, fetch_checkpoint
from ..p2p import P2PNode, PeerAddress
from .worker import ModelWorker

KEEP_LAST = 2  # epoch-end checkpoints kept on disk


def default_root(run_address: str, node_id: str) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "cohort" / "checkpoints" / run_address / node_id


class CheckpointShelf:
    def __init__(self, root: Path, node: P2PNode, worker: ModelWorker) -> None:
        self.root, self.node, self.worker = root, node, worker
        self.writer: CheckpointWriter | None = None
        self.saved: CheckpointInfo | None = None  # our weights at the last epoch end

    async def save(self, model, *, run_id: str, step: int, epoch: int) -> CheckpointInfo:
        """Write the model as a Hugging Face checkpoint and serve it. The weights are copied on the model
        worker (after every step asked before, before any asked after); writing, hashing and pruning old
        ones happen on the writer's own thread."""
        if self.writer is None:
            self.writer = CheckpointWriter(self.root, keep_last=KEEP_LAST)
        writer = self.writer
        future = await self.worker.run(lambda: writer.submit(model, run_id=run_id, step=step, epoch=epoch))
        info = await asyncio.wrap_future(future)
        self.saved = info
        await self.node.share_directory(info.path)
        return info

    async def fetch(self, manifest_hash: bytes, peers: Iterable[PeerAddress]) -> Path:
        """The checkpoint with `manifest_hash`, from the peers that hold it, verified (CheckpointError
        otherwise); afterwards we serve it too."""
        dest = self.root / f"joined-{manifest_hash.hex()[:16]}"
        path = await fetch_checkpoint(FromPeers(self.node, tuple(peers)), manifest_hash, dest)
        assert path is not None
        return path

    async def fetch_hub(self, repo: str, revision: str, manifest_hash: bytes) -> Path:
        """A run's starting checkpoint from a Hugging Face repo (or a local directory), verified."""
        source = FromHub(repo, revision or None, token=os.environ.get("HF_TOKEN"))
        path = await fetch_checkpoint(source, manifest_hash, self.root / f"hub-{manifest_hash.hex()[:16]}")
        assert path is not None
        return path
