"""One check of trainer X at step s: refuse states that are not the committed ones, replay, judge."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from ..distro import BatchId, WireError
from .compare import Thresholds, Verdict, compare_payloads, compare_states, exactly_equal, judge
from .recompute import Replayer, StepInputs
from .sample import CommittedParts, read_sampled, restore_sampled, sample_bands, sampled_fraction
from .state import BEFORE_ANY_STEP, StateError, StateMismatch


def check_step(
    replayer: Replayer,
    *,
    step: int,
    batch: BatchId,
    sequences: torch.Tensor,
    weights: Mapping[str, torch.Tensor] | Callable[[torch.nn.Module], None],
    published: bytes,
    state_before: CommittedParts,
    state_before_commitment: bytes,
    state_after: CommittedParts,
    state_after_commitment: bytes,
    seed: bytes,
    cold_start: bool = False,
    thresholds: Thresholds | None = None,
) -> Verdict:
    """Verdict on X's `published` payload of `step` on `batch` (`sequences` are its tokens).

    `state_before` / `state_after`: the committed states X supplied for after step - 1 and after `step`
    (their manifests and the parts the check reads, `sample.parts_to_fetch`), each refused unless its
    manifest hashes to the commitment X published with that step's result. `seed` draws the sampled bands
    (`sample.sample_seed`). `cold_start`: `step` is X's first since it (re)joined, so the earlier state must
    be a fresh optimizer's; otherwise it must be after step - 1. `weights`: every replica's parameters at
    the start of `step`, before any lookahead (or a loader that puts them into a model)."""
    layout = replayer.optimizer.layout
    samples = sample_bands(layout, seed)
    try:
        if state_before.commitment != state_before_commitment or state_after.commitment != state_after_commitment:
            raise StateMismatch("the supplied state does not match the trainer's commitment")
        before = read_sampled(state_before, layout, samples)
        after = read_sampled(state_after, layout, samples)
    except StateError as e:
        return Verdict(False, f"refused: {e}")
    if after.step != step:
        return Verdict(False, f"refused: the supplied state was taken after step {after.step}, not {step}")
    if cold_start:
        if not before.fresh:
            return Verdict(False, "refused: a first step must start from a fresh optimizer state")
    elif before.step != step - 1:
        return Verdict(False, f"refused: the earlier state was taken after step {before.step}, "
                              f"not {step - 1}")  # fmt: skip
    try:
        replayer.codec.decode(published)
    except WireError as e:
        return Verdict(False, f"the published payload is not a valid result: {e}")

    def restore(optimizer) -> None:  # the sign plane everywhere, the true state on the sampled bands
        restore_sampled(optimizer, state_before, before, samples)

    try:
        replay = replayer.replay(StepInputs(step, batch, weights, restore), sequences)
    except StateError as e:
        return Verdict(False, f"refused: {e}")
    payload = compare_payloads(replayer.codec, published, replay.payload, step, batch, samples)
    state = compare_states(after, replay.state_after, before, layout, replayer.optimizer.config, samples)
    verdict = judge(payload, state, replayer.codec.kind == "1bit", thresholds)
    # bit-exact replays (expected on the trainer's own kind of machine and thread count)
    verdict.metrics["exact"] = float(
        payload.index_agreement == 1.0 and payload.sign_agreement == 1.0 and payload.value_error == 0.0
        and exactly_equal(after, replay.state_after, layout, samples)
    )  # fmt: skip
    verdict.metrics["sampled"] = sampled_fraction(layout, samples)
    verdict.metrics["replay_seconds"] = replay.seconds
    return verdict


__all__ = ["BEFORE_ANY_STEP", "check_step"]
