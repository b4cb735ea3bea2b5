"""A checkpointer's `--hub-repo`: upload each epoch-end checkpoint to the Hugging Face Hub, then point the
chain's checkpoint record at the uploaded revision (the `checkpoint` instruction, which only the run's
checkpointers may send). The chain keeps the step and weights hash the finishers voted; the record gains the
repo and revision, so a joiner with no peer left to serve the weights loads them from the Hub, verified
against that hash.

The pointer is moved only once the vote settled on these very weights: a revision that held other weights
would make every joiner download a checkpoint that fails verification.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from cohort.sdk.errors import CohortError, ProgramError
from cohort.sdk.models import Checkpoint

from ..checkpoint import CheckpointError, CheckpointInfo, HubUpload

if TYPE_CHECKING:
    from .host import ClientHost

VOTE_WAIT = 120.0  # seconds after the upload for the finishers' vote to settle on our weights


async def publish_to_hub(
    c: ClientHost, hub: HubUpload, info: CheckpointInfo, epoch: int, step: int
) -> str | None:
    """Upload `info`'s directory and point the run at it; the revision uploaded (None when the upload
    failed). Every outcome is an event: hub_uploaded, hub_pointed, hub_not_pointed, hub_upload_failed."""
    run = c.latest
    assert run is not None
    started = time.perf_counter()
    message = f"cohort run {run.run_id} epoch {epoch} step {step} (manifest {info.manifest_hash.hex()[:16]})"
    try:
        revision = await asyncio.to_thread(hub.upload, info.path, message=message)
    except CheckpointError as e:
        c.events.emit("hub_upload_failed", epoch=epoch, step=step, error=str(e)[:300])
        return None
    size = sum(p.stat().st_size for p in info.path.rglob("*") if p.is_file())
    c.events.emit("hub_uploaded", epoch=epoch, step=step, repo=hub.repo, revision=revision, bytes=size,
                  seconds=round(time.perf_counter() - started, 3))  # fmt: skip
    reason = await _point(c, hub.repo, revision, info.manifest_hash, step)
    if reason:
        c.events.emit("hub_not_pointed", epoch=epoch, step=step, revision=revision, reason=reason)
    return revision


async def _point(c: ClientHost, repo: str, revision: str, manifest: bytes, step: int) -> str:
    """Send the `checkpoint` instruction once the chain's record holds our weights; why not, or ""."""
    until = time.monotonic() + VOTE_WAIT
    while True:
        run = c.latest
        assert run is not None
        ck = run.model.checkpoint
        if ck.step == step and ck.weights_sha256 == manifest:
            break
        if ck.step > step:
            return f"the run moved on to step {ck.step}'s checkpoint"
        if ck.step == step and ck.weights_sha256 != bytes(32):
            return f"the finishers voted other weights ({ck.weights_sha256.hex()[:16]}), not ours"
        if time.monotonic() > until:
            return f"the finishers' vote did not settle on our weights within {VOTE_WAIT:.0f} s"
        await asyncio.sleep(0.5)
    if c.wallet.pubkey() not in run.checkpointers:
        return (
            f"{c.wallet.pubkey()} is not one of the run's checkpointers (its authority sets them)"
        )
    if ck.repo == repo and ck.revision == revision:
        return ""
    try:
        await c.chain.checkpoint(
            c.wallet, c.run_address, Checkpoint("Hub", repo, step, revision=revision)
        )
    except ProgramError as e:
        return f"the chain refused the pointer: {e.name}"
    except CohortError as e:
        return f"the pointer was not sent: {e}"[:300]
    c.events.emit("hub_pointed", step=step, repo=repo, revision=revision)
    return ""
