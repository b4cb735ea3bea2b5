"""Which tokens a batch id means: the one rule every data provider shares.

A token stream of `n_tokens` is cut into sequences of `seq_len` (the tail that does not fill a
sequence is dropped); the last `heldout_fraction` of them (at least one) is the validation split.
Training index i is sequence `order[i mod n_train]`, `order` a permutation seeded by `seed`;
validation index i is held-out sequence `i mod n_heldout`, in stream order. These are the rules of
TokenDataset, so the built-in corpora give the very tokens they always gave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from .batch import BatchId

Split = Literal["train", "validation"]
SPLITS = ("train", "validation")
MAX_BATCH_SEQUENCES = 1 << 20


@dataclass(frozen=True)
class SequenceLayout:
    n_tokens: int
    seq_len: int
    heldout_fraction: float = 0.05
    seed: int = 0
    order: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if self.n_train < 1:
            raise ValueError(f"{self.n_tokens} tokens are too few for sequences of {self.seq_len}")
        generator = torch.Generator().manual_seed(self.seed)
        object.__setattr__(self, "order", torch.randperm(self.n_train, generator=generator))

    @property
    def n_sequences(self) -> int:
        return self.n_tokens // self.seq_len

    @property
    def n_heldout(self) -> int:
        return max(1, int(self.n_sequences * self.heldout_fraction))

    @property
    def n_train(self) -> int:
        return self.n_sequences - self.n_heldout

    def size(self, split: Split) -> int:
        return self.n_train if split == "train" else self.n_heldout

    def offsets(self, batch: BatchId, split: Split = "train") -> np.ndarray:
        """The first token of each sequence of `batch` (int64, in batch order)."""
        return (self.rows(batch, split) * self.seq_len).numpy()

    def rows(self, batch: BatchId, split: Split = "train") -> torch.Tensor:
        """The stream sequence number of each sequence of `batch` (int64, in batch order)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if len(batch) > MAX_BATCH_SEQUENCES:
            raise ValueError(f"a batch of {len(batch)} sequences exceeds {MAX_BATCH_SEQUENCES}")
        n = self.size(split)
        index = (torch.arange(len(batch), dtype=torch.int64) + batch.start % n) % n  # ids < 2**64
        return self.order[index] if split == "train" else index + self.n_train
