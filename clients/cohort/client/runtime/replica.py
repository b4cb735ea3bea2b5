"""The client's model side as one typed seam: what the runtime asks of a replica of the run's model.

The model's jobs (train, apply, load, digest, checksum, evaluate, verify_step, start_epoch) run on the
one model worker (runtime/worker.py: one thread, one job at a time; verify_step as a background job, whole,
between our own), so they may block; the cheap reads (check, payload_size, state_manifest_limit,
check_parts, can_verify, holding, device, model) are also made from the event loop and must not.

Implemented by `trainer.LocalReplica` (the whole model in this process), `synthetic.SyntheticReplica`
(payloads of the real size without training), `slowdown.SlowedReplica` (a wrapper) and
`sharded.ShardedReplica` (rank 0 of several ranks that speak as one member). They conform structurally (no
subclassing: a subclass would inherit the protocol's empty stubs for anything it forgot, and its
read-only properties would refuse the plain attributes the replicas hold); tests/client/test_replica.py
checks each.

Torch and the verifier's types appear only in annotations, so importing the seam loads neither.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from concurrent.futures import Future

    import torch

    from ..checkpoint import CheckpointInfo, CheckpointWriter
    from ..model import EvalResult
    from ..verify import Verdict


@dataclass(frozen=True)
class StepOutput:
    payload: bytes
    loss: float
    tokens: int
    seconds: float
    # our optimizer state after the step, when the run verifies (its hash is in the payload)
    state: bytes | None = None


class Aborted(Exception):
    """Training stopped between micro-batches on request; the weights are as before the step."""


@dataclass(frozen=True)
class PayloadHeader:
    step: int
    batch: tuple[int, int]
    state: bytes = bytes(32)  # the trainer's committed optimizer state after the step (zero: none)


@runtime_checkable
class Replica(Protocol):
    """One replica of the run's model, as the runtime uses it (connect.py, effects.py)."""

    # read-only properties, so a plain attribute or a computed property both satisfy them
    @property
    def device(self) -> torch.device: ...

    @property
    def model(self) -> torch.nn.Module:
        """The module whose parameters are counted (its class and config are the checkpoint's)."""

    @property
    def payload_size(self) -> int:
        """The exact size of every result of this run (the fetch limit)."""

    def start_epoch(self, start_step: int, cold: bool, verified: bool = False) -> None:
        """The epoch's first step, whether it is a cold start, whether the run verifies results."""

    # -- a round ------------------------------------------------------------------------------------
    def train(
        self, step: int, start: int, end: int, abort: threading.Event | None = None
    ) -> StepOutput:
        """Train the batch [start, end) and return the encoded result; Aborted when `abort` is set."""

    def check(self, payload: bytes) -> PayloadHeader:
        """The step, batch and state commitment a payload carries; an error unless it is a valid result."""

    def apply(self, step: int, payloads: Sequence[bytes]) -> None:
        """Apply a decided list of results (every replica: the same bits)."""

    # -- the replica's identity ---------------------------------------------------------------------
    def digest(self) -> str:
        """The digest of every parameter (model_loaded, checkpoints)."""

    def checksum(self) -> int:
        """The cheap per-round fingerprint of every weight's bits."""

    def load(self, path: Path, manifest_hash: bytes) -> None:
        """Load a verified checkpoint (fresh optimizer momentum)."""

    def checkpoint(self, writer: CheckpointWriter, *, run_id: str, step: int,
                   epoch: int) -> Future[CheckpointInfo]:  # fmt: skip
        """Write the weights as the run's checkpoint into `writer`'s folder: a copy handed to its thread (the
        model trains on meanwhile), or, by a replica that holds no whole copy, written in place (blocking)."""

    def evaluate(self, max_sequences: int) -> EvalResult: ...

    # -- committed state and checks of other trainers -----------------------------------------------
    @property
    def state_manifest_limit(self) -> int:
        """The largest manifest of a state a trainer of this run commits (the fetch limit of a check)."""

    def check_parts(self, seed: bytes, before: bytes, after: bytes) -> list[bytes]:
        """The parts of a trainer's two committed states (manifests `before`, `after`) a check drawn with
        `seed` reads; StateError when a manifest is not one of this run's states."""

    def can_verify(self, step: int) -> bool:
        """Whether we hold what a check of `step` replays from."""

    def holding(self, step: int) -> AbstractContextManager[bool]:
        """Keep what a check of `step` replays from while the context lasts (its fetch may outlast the steps
        the replica keeps it for); yields whether it is held (False: gone already, or too many held)."""

    def verify_step(self, step: int, published: bytes, previous: bytes, seed: bytes, state_before: bytes,
                    before_parts: Mapping[bytes, bytes], state_after: bytes,
                    after_parts: Mapping[bytes, bytes]) -> Verdict | None:  # fmt: skip
        """Replay a trainer's `published` result of `step` from the states it committed (their manifests and
        the parts `check_parts` named) and compare the bands `seed` samples; None when we cannot (we no
        longer hold the step's starting weights)."""
