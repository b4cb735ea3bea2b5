"""Next-token loss (training; evaluation.py uses it on held-out data)."""

from __future__ import annotations

import torch


def lm_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats/token) of a (batch, seq_len) token tensor."""
    return model(input_ids=tokens, labels=tokens).loss
