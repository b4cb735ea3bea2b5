"""One check of trainer X at step s: refuse states that are not the committed ones, replay, judge.

Three stages, so a replay may run anywhere: `open_check` reads and refuses what X supplied, a replay (one
process: `check_step` with a `Replayer`; a member's ranks: runtime/sharded.py) recomputes the step from the
restored state, and `judge_replay` compares the sampled bands and gives the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from ..distro import BatchId, DistroConfig, Layout, WireCodec, WireError
from .compare import Thresholds, Verdict, compare_payloads, compare_states, exactly_equal, judge
from .recompute import Replayer, StepInputs
from .sample import (
    CommittedParts,
    Sample,
    SampledState,
    check_sign_plane,
    read_sampled,
    restore_sampled,
    sample_bands,
    sampled_fraction,
    sampled_of,
    state_manifest,
)
from .state import BEFORE_ANY_STEP, StateError, StateMismatch


@dataclass(frozen=True)
class OpenedCheck:
    """What a check read of X's two committed states: the sampled bands, before and after the step."""

    samples: tuple[Sample, ...]
    before: SampledState
    after: SampledState


def supplied_states(layout: Layout, state_before: bytes, before_parts: Mapping[bytes, bytes], state_after: bytes,
                    after_parts: Mapping[bytes, bytes]) -> tuple[CommittedParts, CommittedParts] | Verdict:  # fmt: skip
    """X's two committed states as a check holds them: their manifests (refused unless they are states of this
    layout) and the parts fetched of them."""
    try:
        return (CommittedParts(state_manifest(state_before, layout), before_parts),
                CommittedParts(state_manifest(state_after, layout), after_parts))  # fmt: skip
    except StateError as e:
        return Verdict(False, f"refused: {e}")


def open_check(
    codec: WireCodec,
    *,
    step: int,
    published: bytes,
    state_before: CommittedParts,
    state_before_commitment: bytes,
    state_after: CommittedParts,
    state_after_commitment: bytes,
    seed: bytes,
    cold_start: bool = False,
) -> OpenedCheck | Verdict:
    """The sampled bands of X's states, or the verdict that refuses what X supplied: states that are not the
    ones it committed, taken after other steps, a sign plane that contradicts them, a payload that is not a
    valid result. `cold_start`: `step` is X's first since it (re)joined, so the earlier state must be a fresh
    optimizer's; otherwise it must be after step - 1."""
    layout = codec.layout
    samples = sample_bands(layout, seed)
    try:
        if (
            state_before.commitment != state_before_commitment
            or state_after.commitment != state_after_commitment
        ):
            raise StateMismatch("the supplied state does not match the trainer's commitment")
        before = read_sampled(state_before, layout, samples)
        after = read_sampled(state_after, layout, samples)
        check_sign_plane(state_before, layout, before, samples)
    except StateError as e:
        return Verdict(False, f"refused: {e}")
    if after.step != step:
        return Verdict(
            False, f"refused: the supplied state was taken after step {after.step}, not {step}"
        )
    if cold_start:
        if not before.fresh:
            return Verdict(False, "refused: a first step must start from a fresh optimizer state")
    elif before.step != step - 1:
        return Verdict(False, f"refused: the earlier state was taken after step {before.step}, "
                              f"not {step - 1}")  # fmt: skip
    try:
        codec.decode(published)
    except WireError as e:
        return Verdict(False, f"the published payload is not a valid result: {e}")
    return OpenedCheck(samples, before, after)


def judge_replay(
    codec: WireCodec,
    config: DistroConfig,
    opened: OpenedCheck,
    *,
    step: int,
    batch: BatchId,
    published: bytes,
    replayed_payload: bytes,
    replayed: SampledState,
    seconds: float,
    thresholds: Thresholds | None = None,
) -> Verdict:
    """The verdict on X's step from a replay of it: its payload and its state on the sampled bands."""
    layout, samples = codec.layout, opened.samples
    payload = compare_payloads(codec, published, replayed_payload, step, batch, samples)
    state = compare_states(opened.after, replayed, opened.before, layout, config, samples)
    verdict = judge(payload, state, codec.kind == "1bit", thresholds)
    # bit-exact replays (expected on the trainer's own kind of machine and thread count)
    verdict.metrics["exact"] = float(
        payload.index_agreement == 1.0 and payload.sign_agreement == 1.0 and payload.value_error == 0.0
        and exactly_equal(opened.after, replayed)
    )  # fmt: skip
    verdict.metrics["sampled"] = sampled_fraction(layout, samples)
    verdict.metrics["replay_seconds"] = seconds
    return verdict


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
    """Verdict on X's `published` payload of `step` on `batch` (`sequences` are its tokens), replayed in this
    process by `replayer`.

    `state_before` / `state_after`: the committed states X supplied for after step - 1 and after `step`
    (their manifests and the parts the check reads, `sample.parts_to_fetch`), each refused unless its
    manifest hashes to the commitment X published with that step's result. `seed` draws the sampled bands
    (`sample.sample_seed`). `weights`: every replica's parameters at the start of `step`, before any
    lookahead (or a loader that puts them into a model)."""
    opened = open_check(replayer.codec, step=step, published=published, state_before=state_before,
                        state_before_commitment=state_before_commitment, state_after=state_after,
                        state_after_commitment=state_after_commitment, seed=seed, cold_start=cold_start)  # fmt: skip
    if isinstance(opened, Verdict):
        return opened

    def restore(
        optimizer,
    ) -> None:  # the sign plane everywhere, the true state on the sampled bands
        restore_sampled(optimizer, state_before, opened.before, opened.samples)

    try:
        replay = replayer.replay(StepInputs(step, batch, weights, restore), sequences)
    except StateError as e:
        return Verdict(False, f"refused: {e}")
    after = replay.state_after
    replayed = sampled_of(after.momentum, after.sent, replayer.codec.layout, opened.samples, step)
    return judge_replay(replayer.codec, replayer.optimizer.config, opened, step=step, batch=batch,
                        published=published, replayed_payload=replay.payload, replayed=replayed,
                        seconds=replay.seconds, thresholds=thresholds)  # fmt: skip


__all__ = [
    "BEFORE_ANY_STEP",
    "OpenedCheck",
    "check_step",
    "judge_replay",
    "open_check",
    "supplied_states",
]
