"""What one client produces for one step, before and after it crossed the wire."""

from __future__ import annotations

from dataclasses import dataclass

from ..data.batch import BatchId
from .compress import SparseTiles


@dataclass(frozen=True)
class DistroResult:
    """One client's compressed momentum for one step: per bucket of the layout, in order."""

    step: int
    batch: BatchId
    tiles: tuple[SparseTiles, ...]
    state: bytes = bytes(
        32
    )  # sha256 of the trainer's optimizer state after the step (zero: not committed)


@dataclass(frozen=True)
class ReceivedResult:
    """A decoded payload (values as the receiver sees them) and the sha256 of its bytes."""

    result: DistroResult
    commitment: bytes
