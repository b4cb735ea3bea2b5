"""Which sequences a client trains on: a half-open interval [start, end) of global sequence indices.

Half-open everywhere (chain, SDK, client, wire), as the coordinator's own batch assignment is."""

from __future__ import annotations

from dataclasses import dataclass

U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class BatchId:
    """The half-open interval [start, end) of global sequence indices a client trained on (never empty)."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (0 <= self.start < self.end <= U64_MAX):
            raise ValueError(
                f"batch id needs 0 <= start < end < 2**64, got [{self.start}, {self.end})"
            )

    def __len__(self) -> int:
        return self.end - self.start


def split_batch(start: int, size: int, replicas: int) -> list[BatchId]:
    """Consecutive shards of the global batch [start, start + size): the first size % replicas get +1."""
    if size < replicas or replicas < 1:
        raise ValueError(f"a batch of {size} sequences cannot be split among {replicas} replicas")
    base, extra = divmod(size, replicas)
    shards, at = [], start
    for r in range(replicas):
        n = base + (1 if r < extra else 0)
        shards.append(BatchId(at, at + n))
        at += n
    return shards
