"""Held-out evaluation: loss and perplexity on a validation split, between rounds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ..data.batch import BatchId
from .loss import lm_loss


class ValidationData(Protocol):
    """What evaluation needs of a data provider (cohort.client.data.DataProvider has it)."""

    @property
    def num_sequences(self) -> int: ...

    def sequences(self, batch: BatchId) -> torch.Tensor: ...


@dataclass(frozen=True)
class EvalResult:
    loss: float  # mean next-token cross-entropy, nats/token
    perplexity: float  # exp(loss)
    tokens: int  # tokens predicted (seq_len - 1 per sequence)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    data: ValidationData | torch.Tensor | Sequence[torch.Tensor],
    max_sequences: int | None = None,
    *,
    batch_size: int = 32,
) -> EvalResult:
    """Loss of `model` on validation sequences: a provider's split (its first `max_sequences`),
    one [n, seq_len] tensor, or a list of such batches. The model's train/eval mode is kept."""
    batches = _batches(data, max_sequences, batch_size)
    if not batches:
        raise ValueError("evaluate needs at least one sequence")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    device = next(model.parameters()).device
    try:
        for tokens in batches:
            n = tokens.numel() - tokens.shape[0]
            total += float(lm_loss(model, tokens.to(device))) * n
            count += n
    finally:
        model.train(was_training)
    loss = total / count
    return EvalResult(loss, math.exp(min(loss, 700.0)), count)


def _batches(data, max_sequences: int | None, batch_size: int) -> list[torch.Tensor]:
    if batch_size < 1 or (max_sequences is not None and max_sequences < 1):
        raise ValueError("batch_size and max_sequences must be >= 1")
    if isinstance(data, torch.Tensor):
        held = data if max_sequences is None else data[:max_sequences]
        return list(held.split(batch_size))
    if hasattr(data, "sequences") and hasattr(data, "num_sequences"):
        n = data.num_sequences if max_sequences is None else min(max_sequences, data.num_sequences)
        return [
            data.sequences(BatchId(start, min(n, start + batch_size)))
            for start in range(0, n, batch_size)
        ]
    batches, left = [], max_sequences
    for tokens in data:
        if left is not None:
            tokens = tokens[:left]
            left -= len(tokens)
        if len(tokens):
            batches.append(tokens)
        if left == 0:
            break
    return batches
