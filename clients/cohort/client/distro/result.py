"""What one client produces for one step, before and after it crossed the wire."""

from __future__ import annotations

from dataclasses import dataclass

from .compress import SparseTiles

U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class BatchId:
    """The closed interval [start, end] of global sequence indices a client trained on."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (0 <= self.start <= self.end <= U64_MAX):
            raise ValueError(
                f"batch id needs 0 <= start <= end < 2**64, got [{self.start}, {self.end}]"
            )


@dataclass(frozen=True)
class DistroResult:
    """One client's compressed momentum for one step: per parameter, in layout order."""

    step: int
    batch: BatchId
    tiles: tuple[SparseTiles, ...]


@dataclass(frozen=True)
class ReceivedResult:
    """A decoded payload (values as the receiver sees them) and the sha256 of its bytes."""

    result: DistroResult
    commitment: bytes
