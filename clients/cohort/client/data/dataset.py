"""Fixed-length token sequences: a shuffled training stream and a held-out tail.

A global batch is a consecutive range of sequence indices (Psyche's data index); the range is
split among replicas in consecutive intervals, the first `size % replicas` getting one more,
so every replica trains on its own shard and a single process can replay the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .batch import BatchId


@dataclass
class TokenDataset:
    """Sequences of `seq_len` tokens cut from one token stream; the last part is held out."""

    tokens: np.ndarray
    seq_len: int
    heldout_fraction: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        n = len(self.tokens) // self.seq_len
        n_heldout = max(1, int(n * self.heldout_fraction))
        if n - n_heldout < 1:
            raise ValueError(
                f"{len(self.tokens)} tokens are too few for sequences of {self.seq_len}"
            )
        sequences = torch.from_numpy(
            np.ascontiguousarray(self.tokens[: n * self.seq_len], dtype=np.int64)
        ).view(n, self.seq_len)
        self.train = sequences[: n - n_heldout]
        self.heldout = sequences[n - n_heldout :]
        generator = torch.Generator().manual_seed(self.seed)
        self._order = torch.randperm(len(self.train), generator=generator)

    def sequences(self, batch: BatchId) -> torch.Tensor:
        """The training sequences with global indices [batch.start, batch.end) (the stream wraps)."""
        index = torch.arange(batch.start, batch.end) % len(self.train)
        return self.train[self._order[index]]

    def heldout_batches(
        self, batch_size: int, max_sequences: int | None = None
    ) -> list[torch.Tensor]:
        """The held-out sequences (optionally the first `max_sequences`) in batches."""
        held = self.heldout if max_sequences is None else self.heldout[:max_sequences]
        return list(held.split(batch_size))

    def unigram_loss(self, vocab_size: int) -> float:
        """Held-out cross-entropy (nats/token) of the training unigram distribution, add-one smoothed:
        the loss of a model that ignores context; a trained model must be clearly below it."""
        counts = torch.bincount(self.train.reshape(-1), minlength=vocab_size).double() + 1.0
        log_p = torch.log(counts / counts.sum())
        # the model is scored on tokens 1.. of each sequence (token 0 has no context)
        return float(-log_p[self.heldout[:, 1:].reshape(-1)].mean())
