"""One check of trainer X at step s: refuse states that are not the committed ones, replay, judge."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..distro import BatchId, WireError
from .compare import Thresholds, Verdict, compare_payloads, compare_states, judge
from .recompute import Replayer, StepInputs
from .state import BEFORE_ANY_STEP, StateError, load_committed, state_commitment_of


def check_step(
    replayer: Replayer,
    *,
    step: int,
    batch: BatchId,
    sequences: torch.Tensor,
    weights: Mapping[str, torch.Tensor],
    published: bytes,
    state_before: bytes,
    state_before_commitment: bytes,
    state_after: bytes,
    state_after_commitment: bytes,
    cold_start: bool = False,
    thresholds: Thresholds | None = None,
) -> Verdict:
    """Verdict on X's `published` payload of `step` on `batch` (`sequences` are its tokens).

    `state_before` / `state_after`: the state bytes X supplied for after step - 1 and after
    step, each refused unless it hashes to the commitment X published with that step's result.
    `cold_start`: `step` is X's first since it (re)joined, so the earlier state must be a fresh
    optimizer's (whose bytes every replica can derive); otherwise it must be after step - 1.
    `weights`: every replica's parameters at the start of `step`, before any lookahead."""
    layout = replayer.optimizer.layout
    try:
        before = load_committed(state_before, state_before_commitment, layout)
        after = load_committed(state_after, state_after_commitment, layout, step)
    except StateError as e:
        return Verdict(False, f"refused: {e}")
    if cold_start:
        fresh = before.sent is None and not any(bool(m.any()) for m in before.momentum)
        if before.step != BEFORE_ANY_STEP or not fresh:
            return Verdict(False, "refused: a first step must start from a fresh optimizer state")
    elif before.step != step - 1:
        return Verdict(False, f"refused: the earlier state was taken after step {before.step}, "
                              f"not {step - 1}")  # fmt: skip
    try:
        replayer.codec.decode(published)
    except WireError as e:
        return Verdict(False, f"the published payload is not a valid result: {e}")
    replay = replayer.replay(StepInputs(step, batch, weights, before), sequences)
    payload = compare_payloads(replayer.codec, published, replay.payload, step, batch)
    state = compare_states(after, replay.state_after, before, layout, replayer.optimizer.config)
    verdict = judge(payload, state, replayer.codec.kind == "1bit", thresholds)
    # bit-exact replays (expected on the trainer's own kind of machine and thread count)
    verdict.metrics["exact"] = float(
        replay.payload == published
        and state_commitment_of(replay.state_after, layout) == state_after_commitment
    )
    verdict.metrics["replay_seconds"] = replay.seconds
    return verdict
