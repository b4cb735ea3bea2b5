"""One replica of the run's model in this process (`LocalReplica`, a `replica.Replica`): build it from
the run's TrainingSpec, train a batch, apply a round.

Blocking torch code, run by the client's one model worker (runtime/worker.py: one thread, never two jobs
at once; our own in order, a check's replay in between), so the event loop keeps gossiping and fetching
while a step computes. Training can be stopped between micro-batches (a cooperative abort), which leaves
the weights as they were.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from cohort.sdk.presets import DistroSpec, LrSpec, TrainingSpec

from ..checkpoint import CheckpointInfo, CheckpointWriter, load_weights
from ..data import BatchId, DataProvider, open_data_location
from ..distro import (
    Constant,
    Cosine,
    DistroConfig,
    DistroOptimizer,
    DistroResult,
    Linear,
    WarmupStableDecay,
)
from ..model import (
    EvalResult,
    build_model,
    config_for,
    evaluate,
    parameter_digest,
    weights_checksum,
)
from ..training import train_step
from ..verify import Replayer, Verdict, check_step
from ..verify.check import supplied_states
from ..verify.sample import (
    manifest_limit,
    parts_to_fetch,
    sample_bands,
    state_manifest,
)
from ..verify.snapshots import WeightSnapshots
from ..verify.state import CommittedState, read_state_into, write_state
from .replica import Aborted, PayloadHeader, StepOutput


def distro_config(spec: DistroSpec) -> DistroConfig:
    return DistroConfig(
        compression_decay=spec.compression_decay,
        compression_chunk=spec.compression_chunk,
        compression_topk=spec.compression_topk,
        weight_decay=spec.weight_decay,
        clip_grad_norm=spec.clip_grad_norm,
        quantize_1bit=spec.quantize_1bit,
        value_dtype=spec.value_dtype,  # type: ignore[arg-type]
        error_feedback=spec.error_feedback,  # type: ignore[arg-type]
    )


def lr_schedule(spec: LrSpec):
    if spec.kind == "Constant":
        return Constant(spec.base_lr, warmup_steps=spec.warmup_steps)
    if spec.kind in ("Linear", "Cosine"):
        kind = Linear if spec.kind == "Linear" else Cosine
        return kind(spec.base_lr, total_steps=spec.total_steps, final_lr=spec.final_lr,
                    warmup_steps=spec.warmup_steps)  # fmt: skip
    if spec.kind == "WarmupStableDecay":
        decay = max(spec.total_steps - spec.warmup_steps - spec.stable_steps, 0)
        return WarmupStableDecay(spec.base_lr, spec.warmup_steps, spec.stable_steps, decay,
                                 spec.final_lr, 0, spec.final_lr)  # fmt: skip
    raise ValueError(f"unknown learning-rate schedule {spec.kind!r}")


def initial_seed(run_address: bytes) -> int:
    """The seed every client derives the first epoch's weights from: the run's own address."""
    return (
        int.from_bytes(
            hashlib.sha256(b"cohort/initial-weights/v1" + run_address).digest()[:8], "little"
        )
        >> 1
    )


def open_dataset(spec: TrainingSpec, split: str = "train") -> DataProvider:
    """The run's sequences from its `data_location` (a built-in corpus, prepared shards on disk or over
    HTTP, a data server), checked against the run's vocabulary; "validation" is the held-out split."""
    return open_data_location(
        spec.data_location, spec.max_seq_len, vocab_size=spec.vocab_size, split=split
    )


# steps whose starting weights a verifier keeps until their checks and disputes can be replayed: step s's
# check seed comes with round s + 3 (CHECK_SEED_LAG 4, seeds one round ahead), a dispute its checkers open
# then has its committee's seed with round s + 6 (DISPUTE_SEED_LAG 3 after the round it opened in), by when
# steps up to s + 5 + pipeline_depth (<= 4) may be trained; one more for a replay that waits a round in the
# worker's queue (a replay is the worker's background job: its starvation guard lets at most a round of our
# own jobs pass it, worker.PATIENCE). A dispute replayed later than that is skipped by its committee and lapses.
# A check that started within the window holds its step's snapshot until it ends (`holding`): in a fast run
# over slow links, its fetch outlasts these steps.
KEPT_SNAPSHOTS = 11
# our own committed states stay on disk for the blob store to serve and collect: it keeps each for its round
# plus KEPT_STATES - KEPT_FOR_CHECKS - 1 (runtime/effects.py STATE_EXTRA_ROUNDS)
KEPT_STATES = 16
# the replica removes its committed states only past this many steps: before that the blob store decides, which
# keeps a state a check is still reading past KEPT_STATES (blob_store.HOLD_SECONDS, at most MAX_HELD of them)
STATE_BACKSTOP = 4 * KEPT_STATES


@dataclass
class ColdStart:
    """Cold-start warmup (`cold_start_warmup_steps`): in an epoch that follows a pause every replica's
    momentum starts from zero, so the learning rate ramps up linearly over that many steps from the epoch's
    first step. The chain says when (Run.cold_start_epoch), so every replica uses the same rates."""

    base: object  # the run's schedule
    steps: int
    start: int = 0
    active: bool = False

    def __call__(self, step: int) -> float:
        lr = self.base(step)  # type: ignore[operator]
        if self.active and self.steps > 0 and step < self.start + self.steps:
            lr *= max(step - self.start + 1, 0) / self.steps
        return lr


class CommittedStates:
    """A replica's own committed states on disk, in `folder`: each in a directory named by its step and
    commitment (a step trained again never overwrites files a server may be reading), the last STATE_BACKSTOP
    steps kept (the blob store, which serves them, collects them sooner unless a check is still reading)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._steps: dict[int, list[Path]] = {}

    def commit(self, step: int, write: Callable[[Path], CommittedState]) -> CommittedState:
        """The state `write` writes into the directory it is given, kept under its final name."""
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f"state-{step}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        written = write(partial)
        path = self.folder / f"state-{step}-{written.commitment.hex()[:16]}"
        if path.exists():  # the same state committed again: the one being served stays
            shutil.rmtree(partial)
        else:
            partial.replace(path)
        self._steps.setdefault(step, []).append(path)
        for old in [s for s in self._steps if s <= step - STATE_BACKSTOP]:
            for stale in self._steps.pop(old):
                shutil.rmtree(stale, ignore_errors=True)
        return replace(written, root=path)


class LocalReplica:
    """The model, its DisTrO optimizer and the data, for one client: a `Replica` (replica.py) held whole
    in this process on one device."""

    def __init__(self, spec: TrainingSpec, *, seed: int, device: str = "cpu", micro_batch_size: int | None = None,
                 scratch: Path | None = None, activation_checkpointing: bool = False) -> None:  # fmt: skip
        """`scratch`: a directory of this replica's own for what verification keeps on disk (weight
        snapshots, committed states, the stash of a check); default: a temporary one, removed with it.
        `activation_checkpointing`: keep only each decoder layer's input through the forward and recompute
        the rest in the backward (~1/3 more compute, activations of one layer instead of all). The recompute
        runs the same kernels on the same inputs, so gradients, payloads and states are bit for bit those
        of a replica without it: a member's own choice, not the run's."""
        self.spec = spec
        self.device = torch.device(device)
        self.micro_batch_size = micro_batch_size
        config = config_for(spec.architecture, spec.hf_config, vocab_size=spec.vocab_size,
                            max_seq_len=spec.max_seq_len)  # fmt: skip
        self.model_config = config
        self.model = build_model(config, seed=seed, device=self.device)
        self.model.train()
        if activation_checkpointing:
            self.model.config.use_cache = (
                False  # no generation cache in training (it would warn and drop it)
            )
            self.model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.cold_start = ColdStart(lr_schedule(spec.lr), spec.cold_start_warmup_steps)
        self.optimizer = DistroOptimizer(
            self.model.named_parameters(), distro_config(spec.distro), self.cold_start
        )
        self.data = open_dataset(spec)
        self.validation = open_dataset(spec, split="validation")
        # verification (the run checks a share of results): commit our state each step, keep snapshots, on
        # disk: a member's memory stays the training's own whether or not the run verifies
        self.commit_state = False
        self._scratch_dir = (
            tempfile.TemporaryDirectory(prefix="cohort-replica-") if scratch is None else None
        )
        self.scratch = Path(self._scratch_dir.name) if self._scratch_dir is not None else scratch
        for leftover in (
            "snapshots",
            "stash",
            "states",
            "checks",
        ):  # a previous run of this client's: nobody serves them
            shutil.rmtree(self.scratch / leftover, ignore_errors=True)
        self.snapshots = WeightSnapshots(
            self.scratch / "snapshots", KEPT_SNAPSHOTS
        )  # weights at a step's start
        self._stash = WeightSnapshots(
            self.scratch / "stash", 1
        )  # our own weights while a check borrows them
        self._states = CommittedStates(self.scratch / "states")

    @property
    def codec(self):
        return self.optimizer.codec

    def start_epoch(self, start_step: int, cold: bool, verified: bool = False) -> None:
        """The epoch's first step, whether it is a cold start (the learning-rate ramp), and whether the run
        verifies results (then every step commits our optimizer state and keeps its starting weights)."""
        self.cold_start.start, self.cold_start.active = start_step, cold
        self.commit_state = verified
        self.snapshots.clear()

    @property
    def payload_size(self) -> int:
        """The exact size of every result of this run's model and config (the fetch limit)."""
        return self.codec.size

    def train(
        self, step: int, start: int, end: int, abort: threading.Event | None = None
    ) -> StepOutput:
        """Forward/backward over the batch [start, end) in micro-batches, then DisTrO's compressed result
        (training.train_step: the very code a verifier replays). With `abort` set between micro-batches the
        step stops (Aborted) and the weights are restored."""
        started = time.perf_counter()
        batch = BatchId(start, end)
        sequences = self.data.sequences(batch).to(self.device)
        if (
            self.commit_state
        ):  # every replica's weights at this step's start: what a check of it replays from
            self.snapshots.take(step, self.model)

        def before_chunk() -> None:
            if abort is not None and abort.is_set():
                raise Aborted(f"training of step {step} stopped")

        try:
            result, loss = train_step(self.model, self.optimizer, step, batch, sequences, self.micro_batch_size,
                                      before_chunk=before_chunk)  # fmt: skip
        except BaseException:
            self.optimizer.abandon_step()
            raise
        state = self._commit(step) if self.commit_state else None
        if state is not None:
            result = replace(result, state=state.commitment)
        payload = self.codec.encode(result)
        return StepOutput(payload, loss, sequences.numel(), time.perf_counter() - started, state)

    def _commit(self, step: int) -> CommittedState:
        """Our optimizer state after `step`, on disk (see CommittedStates)."""
        return self._states.commit(step, lambda partial: write_state(self.optimizer, step, partial))

    def apply(self, step: int, payloads: Sequence[bytes]) -> None:
        """Sign-SGD along the aggregate of the round's accepted results (every replica: the same bits)."""
        self.optimizer.apply(step, [self.codec.decode(p) for p in payloads])

    def check(self, payload: bytes) -> PayloadHeader:
        """The step and batch a payload says it trained; WireError unless it is a valid result for this
        run's model (every byte checked: layout, sizes, indices, values)."""
        result: DistroResult = self.codec.decode(payload).result
        return PayloadHeader(result.step, (result.batch.start, result.batch.end), result.state)

    @property
    def state_manifest_limit(self) -> int:
        """The largest manifest of a state a trainer of this run commits (the fetch limit of a check)."""
        return manifest_limit(self.optimizer.layout)

    def check_parts(self, seed: bytes, before: bytes, after: bytes) -> list[bytes]:
        """The parts of a trainer's two committed states (their manifests `before` and `after`) that a check
        drawn with `seed` reads; StateError when a manifest is not one of this run's states."""
        layout = self.optimizer.layout
        return parts_to_fetch(layout, sample_bands(layout, seed), state_manifest(before, layout),
                              state_manifest(after, layout))  # fmt: skip

    def can_verify(self, step: int) -> bool:
        """Whether we hold the weights a check of `step` replays from (we trained that step ourselves)."""
        return step in self.snapshots

    def holding(self, step: int) -> AbstractContextManager[bool]:
        """Keep the weights of `step`'s start while a check of it runs (WeightSnapshots.hold)."""
        return self.snapshots.holding(step)

    def verify_step(self, step: int, published: bytes, previous: bytes, seed: bytes, state_before: bytes,
                    before_parts: Mapping[bytes, bytes], state_after: bytes,
                    after_parts: Mapping[bytes, bytes]) -> Verdict | None:  # fmt: skip
        """Replay a trainer's `published` result of `step` from the states it committed (manifest
        `state_before` should hash to the state in its `previous` result, of step - 1; `state_after` to the
        one in `published`; the parts are those `check_parts(seed, ...)` named) and the weights every
        replica held at the step's start, and compare the bands `seed` samples. None: we do not hold those
        weights (we did not train that step ourselves), so we cannot check it."""
        if step not in self.snapshots:
            return None
        header, before = self.check(published), self.check(previous)
        batch = BatchId(*header.batch)
        sequences = self.data.sequences(batch)
        layout = self.optimizer.layout
        supplied = supplied_states(layout, state_before, before_parts, state_after, after_parts)
        if isinstance(supplied, Verdict):
            return supplied
        # the check borrows our model and optimizer (no second replica): ours wait on disk meanwhile
        self._stash.take(0, self.model)
        own = write_state(self.optimizer, 0, self._stash.root / "own-state", signs=False)
        try:
            replayer = Replayer.borrowing(self.model, self.optimizer, self.micro_batch_size)
            return check_step(replayer, step=step, batch=batch, sequences=sequences,
                              weights=lambda model: self.snapshots.load_into(step, model), published=published,
                              state_before=supplied[0], state_before_commitment=before.state,
                              state_after=supplied[1], state_after_commitment=header.state, seed=seed)  # fmt: skip
        finally:
            self.optimizer.abandon_step()  # a replay stopped midway leaves no lookahead or gradients behind
            self._stash.load_into(0, self.model)
            read_state_into(self.optimizer, own.root)

    def evaluate(self, max_sequences: int) -> EvalResult:
        """Held-out loss on the first `max_sequences` of the validation split (the same ones everywhere)."""
        return evaluate(self.model, self.validation, max_sequences)

    def digest(self) -> str:
        return parameter_digest(self.model)

    def checksum(self) -> int:
        """The per-round replica fingerprint (every weight's bits, one cheap pass)."""
        return weights_checksum(self.model)

    def load(self, path: Path, manifest_hash: bytes) -> None:
        """The weights of a verified checkpoint, with fresh momentum (a cold start for this replica:
        DisTrO's error feedback is never checkpointed, psyche-reference 3.6)."""
        load_weights(self.model, path, manifest_hash)
        self.optimizer.reset_momentum()

    def checkpoint(
        self, writer: CheckpointWriter, *, run_id: str, step: int, epoch: int
    ) -> Future[CheckpointInfo]:
        """A copy of the weights, written by `writer`'s thread while training goes on."""
        return writer.submit(self.model, run_id=run_id, step=step, epoch=epoch)
