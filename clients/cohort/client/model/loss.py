"""Next-token loss for training and held-out evaluation."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def lm_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats/token) of a (batch, seq_len) token tensor."""
    return model(input_ids=tokens, labels=tokens).loss


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: Sequence[torch.Tensor]) -> float:
    """Mean next-token loss over held-out batches, weighted by predicted tokens."""
    if not batches:
        raise ValueError("evaluate needs at least one batch")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for tokens in batches:
        n = tokens.numel() - tokens.shape[0]
        total += float(lm_loss(model, tokens.to(device))) * n
        count += n
    model.train(was_training)
    return total / count
