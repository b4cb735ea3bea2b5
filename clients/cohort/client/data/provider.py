"""The data provider interface: a batch id in, the same [n, seq_len] int64 tokens on every machine.

Synchronous on purpose: the client calls `sequences` once per round from a worker thread, so a
provider may block on disk or network (each bounds its own time) without an event loop of its own.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from .batch import BatchId
from .layout import SequenceLayout, Split


class DataProvider(Protocol):
    seq_len: int
    vocab_size: int
    split: Split

    @property
    def num_sequences(self) -> int:
        """Sequences in this split; batch ids beyond it wrap around."""
        ...

    def sequences(self, batch: BatchId) -> torch.Tensor:
        """The tokens of `batch`: shape [len(batch), seq_len], dtype int64."""
        ...

    def close(self) -> None: ...


class TokenSource(Protocol):
    """A token stream: local shards, an HTTP server's shards, or an array in memory."""

    n_tokens: int
    vocab_size: int
    heldout_fraction: float

    def read(self, offset: int, count: int) -> np.ndarray: ...

    def close(self) -> None: ...


class TokenSequences:
    """A DataProvider over a token stream, by the shared SequenceLayout."""

    def __init__(
        self, source: TokenSource, seq_len: int, *, split: Split = "train", seed: int = 0
    ) -> None:
        self.source = source
        self.layout = SequenceLayout(source.n_tokens, seq_len, source.heldout_fraction, seed)
        self.layout.size(split)  # split checked here, not at the first batch
        if split not in ("train", "validation"):
            raise ValueError(f"split must be train or validation, got {split!r}")
        self.seq_len = seq_len
        self.vocab_size = source.vocab_size
        self.split = split

    @property
    def num_sequences(self) -> int:
        return self.layout.size(self.split)

    def sequences(self, batch: BatchId) -> torch.Tensor:
        offsets = self.layout.offsets(batch, self.split)
        rows = [self.source.read(int(o), self.seq_len) for o in offsets]
        return torch.from_numpy(np.stack(rows).astype(np.int64, copy=False))

    def close(self) -> None:
        self.source.close()
