"""Emulated slower hardware (`cohort train --slowdown F`), for benchmarks and tests of uneven hardware on
one machine: every trained step takes F times what it computed (the difference slept, abortably), so the
client measures, declares and gets the share of a machine F times slower. Nothing else changes."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from .trainer import Aborted, StepOutput


class SlowedTrainer:
    """A trainer whose `train` takes `factor` times as long; every other attribute is the wrapped one's."""

    def __init__(self, inner: Any, factor: float) -> None:
        self.inner, self.factor = inner, factor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def train(self, step: int, start: int, end: int, abort: threading.Event | None = None) -> StepOutput:
        out = self.inner.train(step, start, end, abort)
        deadline = time.perf_counter() + out.seconds * (self.factor - 1)
        while (left := deadline - time.perf_counter()) > 0:
            if abort is not None and abort.wait(min(left, 0.05)):
                raise Aborted(f"step {step} stopped while slowed")
            if abort is None:
                time.sleep(min(left, 0.05))
        return replace(out, seconds=out.seconds * self.factor)
