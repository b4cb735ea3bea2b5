"""Emulated slower hardware (`cohort train --slowdown F`), for benchmarks and tests of uneven hardware on
one machine: every trained step takes F times what it computed (the difference slept, abortably), so the
client measures, declares and gets the share of a machine F times slower. Nothing else changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .replica import Aborted, PayloadHeader, Replica, StepOutput

if TYPE_CHECKING:
    from concurrent.futures import Future

    import torch

    from ..checkpoint import CheckpointInfo, CheckpointWriter
    from ..model import EvalResult
    from ..verify import Verdict


class SlowedReplica:
    """A `Replica` whose `train` takes `factor` times as long; every other member is the wrapped one's,
    forwarded one by one (so the seam stays typed: a new protocol member must be forwarded here too)."""

    def __init__(self, inner: Replica, factor: float) -> None:
        self.inner, self.factor = inner, factor

    def train(
        self, step: int, start: int, end: int, abort: threading.Event | None = None
    ) -> StepOutput:
        out = self.inner.train(step, start, end, abort)
        deadline = time.perf_counter() + out.seconds * (self.factor - 1)
        while (left := deadline - time.perf_counter()) > 0:
            if abort is not None and abort.wait(min(left, 0.05)):
                raise Aborted(f"step {step} stopped while slowed")
            if abort is None:
                time.sleep(min(left, 0.05))
        return replace(out, seconds=out.seconds * self.factor)

    # -- the rest, unchanged ------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.inner.device

    @property
    def model(self) -> torch.nn.Module:
        return self.inner.model

    def checkpoint(
        self, writer: CheckpointWriter, *, run_id: str, step: int, epoch: int
    ) -> Future[CheckpointInfo]:
        return self.inner.checkpoint(writer, run_id=run_id, step=step, epoch=epoch)

    @property
    def payload_size(self) -> int:
        return self.inner.payload_size

    @property
    def state_manifest_limit(self) -> int:
        return self.inner.state_manifest_limit

    def check_parts(self, seed: bytes, before: bytes, after: bytes) -> list[bytes]:
        return self.inner.check_parts(seed, before, after)

    def start_epoch(self, start_step: int, cold: bool, verified: bool = False) -> None:
        self.inner.start_epoch(start_step, cold, verified)

    def check(self, payload: bytes) -> PayloadHeader:
        return self.inner.check(payload)

    def apply(self, step: int, payloads: Sequence[bytes]) -> None:
        self.inner.apply(step, payloads)

    def digest(self) -> str:
        return self.inner.digest()

    def checksum(self) -> int:
        return self.inner.checksum()

    def load(self, path: Path, manifest_hash: bytes) -> None:
        self.inner.load(path, manifest_hash)

    def evaluate(self, max_sequences: int) -> EvalResult:
        return self.inner.evaluate(max_sequences)

    def can_verify(self, step: int) -> bool:
        return self.inner.can_verify(step)

    def holding(self, step: int) -> AbstractContextManager[bool]:
        return self.inner.holding(step)

    def verify_step(self, step: int, published: bytes, previous: bytes, seed: bytes, state_before: bytes,
                    before_parts: Mapping[bytes, bytes], state_after: bytes,
                    after_parts: Mapping[bytes, bytes]) -> Verdict | None:  # fmt: skip
        return self.inner.verify_step(
            step, published, previous, seed, state_before, before_parts, state_after, after_parts
        )
