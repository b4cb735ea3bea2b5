"""Weights a member keeps on disk for the checks that may still be drawn on steps it trained.

A check of step s replays from the weights every replica held at the start of step s. A member keeps them
for its last few steps (`keep`), one raw file per step (each parameter's bytes in `named_parameters`
order), written from the parameters where they lie and read straight back into a model's parameters: no
copy of the model in memory, whatever its size. A check still fetching over a slow link holds its step's
file past that (`hold`): the window counts steps, and a fast run's steps outpace a slow fetch.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

STREAM_BYTES = 1 << 26  # written and read in pieces of at most this many bytes


def _pieces(p: torch.Tensor) -> list[memoryview]:
    """The parameter's bytes as views into it (no copy for a CPU tensor on a little-endian host)."""
    if (
        not p.is_contiguous()
    ):  # reshape would copy: a load would write into the copy, not the weights
        raise RuntimeError("weight snapshots need contiguous tensors")
    flat = p.detach().reshape(-1)
    if flat.device.type != "cpu" or sys.byteorder != "little":
        raise RuntimeError("weight snapshots need CPU tensors on a little-endian host")
    raw = memoryview(flat.view(torch.uint8).numpy())
    return [raw[lo : lo + STREAM_BYTES] for lo in range(0, len(raw), STREAM_BYTES)]


def _tensors(weights: torch.nn.Module | Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
    """A model's parameters in order, or the tensors given (a sharded member's rows of each parameter)."""
    return list(weights.parameters()) if isinstance(weights, torch.nn.Module) else weights


class WeightSnapshots:
    """Files `weights-<step>.bin` under `root`: the newest `keep` steps, and any older one a check holds (at
    most `keep` of those: past that a hold is refused). Holds are taken and let go from the event loop while
    the model worker takes snapshots: a lock guards them, and files are removed only by `take` and `clear`
    (the worker's), never under a replay that reads one."""

    def __init__(self, root: Path, keep: int) -> None:
        self.root, self.keep = root, keep
        root.mkdir(parents=True, exist_ok=True)
        self.steps: list[int] = []
        self._held: Counter[int] = Counter()
        self._lock = threading.Lock()

    def hold(self, step: int) -> bool:
        """Keep `step`'s file past the window until `release`; False (nothing held) when it is gone already,
        or `keep` older steps are held already."""
        with self._lock:
            if step not in self.steps or (step not in self._held and len(self._held) >= self.keep):
                return False
            self._held[step] += 1
            return True

    def release(self, step: int) -> None:
        """Let go of one hold of `step` (its file goes with the next `take` once it is past the window)."""
        with self._lock:
            self._held[step] -= 1
            if self._held[step] <= 0:
                del self._held[step]

    def held(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(self._held)

    @contextmanager
    def holding(self, step: int) -> Iterator[bool]:
        """`hold` for as long as the context lasts; yields whether `step` is held."""
        held = self.hold(step)
        try:
            yield held
        finally:
            if held:
                self.release(step)

    def path(self, step: int) -> Path:
        return self.root / f"weights-{step}.bin"

    def __contains__(self, step: object) -> bool:
        return step in self.steps

    def take(
        self,
        step: int,
        model: torch.nn.Module | Sequence[torch.Tensor],
        held: Iterable[int] | None = None,
    ) -> None:
        """Write the model's weights (or the tensors given) as the start of `step`, and forget the oldest
        beyond `keep` but those held (ours, or `held`: the steps rank 0 holds, for a sharded member's other
        ranks, so that every rank keeps the same files)."""
        with open(self.path(step), "wb") as f:
            for p in _tensors(model):
                if p.device.type == "cpu":
                    for piece in _pieces(p):
                        f.write(piece)
                else:  # an accelerator's weights come over in pieces (bounded host memory)
                    flat = p.detach().reshape(-1)
                    per = max(1, STREAM_BYTES // flat.element_size())
                    for lo in range(0, flat.numel(), per):
                        f.write(memoryview(flat[lo : lo + per].cpu().view(torch.uint8).numpy()))
        if step not in self.steps:
            self.steps.append(step)
            self.steps.sort()
        kept = set(self.held() if held is None else held)
        loose = [s for s in self.steps if s not in kept]
        for old in loose[: max(0, len(loose) - self.keep)]:
            self.steps.remove(old)
            self.path(old).unlink(missing_ok=True)

    @torch.no_grad()
    def load_into(self, step: int, model: torch.nn.Module | Sequence[torch.Tensor]) -> None:
        """Put the weights of `step`'s start into `model` (same architecture; or the same tensors) in place."""
        with open(self.path(step), "rb") as f:
            for p in _tensors(model):
                if p.device.type == "cpu":
                    for piece in _pieces(p):
                        if f.readinto(piece) != len(piece):
                            raise RuntimeError(f"weight snapshot of step {step} is truncated")
                else:
                    flat = p.detach().view(-1)
                    per = max(1, STREAM_BYTES // flat.element_size())
                    for lo in range(0, flat.numel(), per):
                        part = flat[lo : lo + per]
                        raw = f.read(part.numel() * part.element_size())
                        part.copy_(torch.frombuffer(bytearray(raw), dtype=part.dtype))

    def clear(self, held: Iterable[int] | None = None) -> None:
        """Forget every step but those held (a check of the last epoch's may still be fetching; `held` as
        in `take`)."""
        kept = set(self.held() if held is None else held)
        for step in [s for s in self.steps if s not in kept]:
            self.path(step).unlink(missing_ok=True)
            self.steps.remove(step)
