"""Weights a member keeps on disk for the checks that may still be drawn on steps it trained.

A check of step s replays from the weights every replica held at the start of step s. A member keeps them
for its last few steps (`keep`), one raw file per step (each parameter's bytes in `named_parameters`
order), written from the parameters where they lie and read straight back into a model's parameters: no
copy of the model in memory, whatever its size.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
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
    """Files `weights-<step>.bin` under `root`, the newest `keep` steps."""

    def __init__(self, root: Path, keep: int) -> None:
        self.root, self.keep = root, keep
        root.mkdir(parents=True, exist_ok=True)
        self.steps: list[int] = []

    def path(self, step: int) -> Path:
        return self.root / f"weights-{step}.bin"

    def __contains__(self, step: object) -> bool:
        return step in self.steps

    def take(self, step: int, model: torch.nn.Module | Sequence[torch.Tensor]) -> None:
        """Write the model's weights (or the tensors given) as the start of `step`, and forget the oldest
        beyond `keep`."""
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
        while len(self.steps) > self.keep:
            self.path(self.steps.pop(0)).unlink(missing_ok=True)

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

    def clear(self) -> None:
        for step in self.steps:
            self.path(step).unlink(missing_ok=True)
        self.steps.clear()
