"""Learning-rate schedules (Psyche's Constant / Linear / Cosine / WarmupStableDecay) and cold start.

Each schedule is a frozen dataclass called with the step number. Unlike Psyche, every schedule
is clamped after its last step: the cosine does not climb back up past `total_steps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class Schedule(Protocol):
    def __call__(self, step: int) -> float: ...


def _check_lr(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")


def _check_steps(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def _check_step(step: int) -> None:
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")


def _warmup(step: int, init_lr: float, base_lr: float, warmup_steps: int) -> float:
    return init_lr + (base_lr - init_lr) * step / warmup_steps


def _cosine(progress: float, start_lr: float, final_lr: float) -> float:
    return final_lr + (start_lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass(frozen=True)
class Constant:
    base_lr: float
    warmup_steps: int = 0
    warmup_init_lr: float = 0.0

    def __post_init__(self) -> None:
        _check_lr("base_lr", self.base_lr)
        _check_lr("warmup_init_lr", self.warmup_init_lr)
        _check_steps("warmup_steps", self.warmup_steps)

    def __call__(self, step: int) -> float:
        _check_step(step)
        if step < self.warmup_steps:
            return _warmup(step, self.warmup_init_lr, self.base_lr, self.warmup_steps)
        return self.base_lr


@dataclass(frozen=True)
class _Decaying:
    base_lr: float
    total_steps: int
    final_lr: float = 0.0
    warmup_steps: int = 0
    warmup_init_lr: float = 0.0

    def __post_init__(self) -> None:
        _check_lr("base_lr", self.base_lr)
        _check_lr("final_lr", self.final_lr)
        _check_lr("warmup_init_lr", self.warmup_init_lr)
        _check_steps("warmup_steps", self.warmup_steps)
        _check_steps("total_steps", self.total_steps)
        if self.total_steps <= self.warmup_steps:
            raise ValueError(
                f"total_steps ({self.total_steps}) must exceed warmup_steps ({self.warmup_steps})"
            )

    def __call__(self, step: int) -> float:
        _check_step(step)
        if step < self.warmup_steps:
            return _warmup(step, self.warmup_init_lr, self.base_lr, self.warmup_steps)
        if step >= self.total_steps:
            return self.final_lr
        return self._decay((step - self.warmup_steps) / (self.total_steps - self.warmup_steps))

    def _decay(self, progress: float) -> float:
        raise NotImplementedError


@dataclass(frozen=True)
class Linear(_Decaying):
    """Warmup, then linear from base_lr to final_lr at total_steps, then final_lr."""

    def _decay(self, progress: float) -> float:
        return self.base_lr + (self.final_lr - self.base_lr) * progress


@dataclass(frozen=True)
class Cosine(_Decaying):
    """Warmup, then half a cosine from base_lr to final_lr at total_steps, then final_lr."""

    def _decay(self, progress: float) -> float:
        return _cosine(progress, self.base_lr, self.final_lr)


@dataclass(frozen=True)
class WarmupStableDecay:
    """Warmup -> stable at base_lr -> cosine to cosine_decay_final_lr -> linear to
    linear_decay_final_lr -> constant (the Consilience schedule)."""

    base_lr: float
    warmup_steps: int
    stable_steps: int
    cosine_decay_steps: int
    cosine_decay_final_lr: float
    linear_decay_steps: int
    linear_decay_final_lr: float
    warmup_init_lr: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base_lr", "cosine_decay_final_lr", "linear_decay_final_lr", "warmup_init_lr"):
            _check_lr(name, getattr(self, name))
        for name in ("warmup_steps", "stable_steps", "cosine_decay_steps", "linear_decay_steps"):
            _check_steps(name, getattr(self, name))

    def __call__(self, step: int) -> float:
        _check_step(step)
        if step < self.warmup_steps:
            return _warmup(step, self.warmup_init_lr, self.base_lr, self.warmup_steps)
        t = step - self.warmup_steps
        if t < self.stable_steps:
            return self.base_lr
        t -= self.stable_steps
        if t < self.cosine_decay_steps:
            return _cosine(t / self.cosine_decay_steps, self.base_lr, self.cosine_decay_final_lr)
        t -= self.cosine_decay_steps
        if t < self.linear_decay_steps:
            start, final = self.cosine_decay_final_lr, self.linear_decay_final_lr
            return start + (final - start) * t / self.linear_decay_steps
        return self.linear_decay_final_lr


@dataclass(frozen=True)
class ColdStart:
    """Scales a schedule by (step - start) / warmup_steps inside [start, start + warmup_steps).

    Used after a pause or when a client joins with fresh momentum: the first updates are damped.
    """

    schedule: Schedule
    start_step: int
    warmup_steps: int

    def __post_init__(self) -> None:
        _check_steps("start_step", self.start_step)
        _check_steps("warmup_steps", self.warmup_steps)

    def factor(self, step: int) -> float:
        if self.start_step <= step < self.start_step + self.warmup_steps:
            return (step - self.start_step) / self.warmup_steps
        return 1.0

    def __call__(self, step: int) -> float:
        return self.schedule(step) * self.factor(step)
