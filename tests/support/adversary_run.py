"""Runs with adversaries (tests/support/adversary.py) among honest clients: how to start one, wait for its
conviction, and check that the honest members came through an epoch unharmed."""

from __future__ import annotations

import os
from pathlib import Path

from cohort.client.runtime.local_run import FAILURE_EVENTS, LocalRun, TrainerProcess
from cohort.sdk.models import Run

TESTS = str(Path(__file__).resolve().parents[1])


def adversary(mode: str) -> dict:
    """start_trainer's arguments for a member running the client with behaviour `mode` swapped."""
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH", "")) if p)
    return {
        "entry": ("-m", "support.adversary"),
        "env": {"COHORT_ADVERSARY": mode, "PYTHONPATH": path},
    }


def honest_failures(trainer: TrainerProcess, refused: frozenset[int] = frozenset()) -> list[str]:
    """What went wrong in an honest member (local_run.failures), less the refusals it owes to an adversary:
    a `bad_result` for a result of a trainer in `refused` (its epoch index), whose copies it was right to
    refuse. Anything else still counts, a refusal of anyone else's result or of a results list included."""
    found = [f"{e['event']}: {e}" for e in trainer.events() if e["event"] in FAILURE_EVENTS
             and not (e["event"] == "bad_result" and e.get("sender") in refused)]  # fmt: skip
    if trainer.log_path.exists() and "Traceback" in trainer.log_path.read_text(errors="replace"):
        found.append("traceback in " + trainer.log_path.name)
    return found


async def conviction(lr: LocalRun, member: TrainerProcess, timeout: float, what: str) -> Run:
    """The run once `member` is convicted on chain."""
    key = member.wallet.pubkey()
    return await lr.wait_for(
        lambda r: (c := r.client(key)) is not None and c.state == "Convicted", timeout, what
    )


async def honest_epoch(lr: LocalRun, honest: list[TrainerProcess], cheats: list[TrainerProcess], epoch: int,
                       timeout: float, refused: frozenset[int] = frozenset()) -> Run:  # fmt: skip
    """Wait for `epoch` to end, then check that the honest members came through it unharmed: alive, no
    failure (but refusing the results of the trainers in `refused`), none left, their replicas identical at
    its end, each earned points; the cheats earned none. Returns the run after the epoch."""
    end = await lr.wait_for(
        lambda r: r.progress.epoch >= epoch + 1, timeout, f"the end of epoch {epoch}"
    )
    await lr.wait_for_events("epoch_end", 1, 30, trainers=honest, epoch=epoch)
    assert all(t.alive for t in honest)
    failed = [f for t in honest for f in honest_failures(t, refused)]
    assert not failed, failed
    assert not [e for t in honest for e in t.events("left_epoch")]
    ends = {e["digest"] for t in honest for e in t.events("epoch_end") if e["epoch"] == epoch}
    assert len(ends) == 1, ends
    earned = {e.signer: e.earned for e in end.registry}
    assert all(earned[t.wallet.pubkey()] > 0 for t in honest), earned
    assert all(earned.get(t.wallet.pubkey(), 0) == 0 for t in cheats), earned
    return end
