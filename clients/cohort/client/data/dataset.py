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
from .layout import SequenceLayout


@dataclass
class TokenDataset:
    """Sequences of `seq_len` tokens cut from one token stream; the last part is held out."""

    tokens: np.ndarray
    seq_len: int
    heldout_fraction: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        self.layout = SequenceLayout(
            len(self.tokens), self.seq_len, self.heldout_fraction, self.seed
        )
        n = self.layout.n_sequences
        sequences = torch.from_numpy(
            np.ascontiguousarray(self.tokens[: n * self.seq_len], dtype=np.int64)
        ).view(n, self.seq_len)
        self.train = sequences[: self.layout.n_train]
        self.heldout = sequences[self.layout.n_train :]

    def sequences(self, batch: BatchId) -> torch.Tensor:
        """The training sequences with global indices [batch.start, batch.end) (the stream wraps)."""
        return self.train[self.layout.rows(batch)]

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
