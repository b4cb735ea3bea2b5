"""One training step of a replica: what `runtime.LocalReplica.train` runs and `verify.Replayer` replays."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..distro import BatchId, DistroOptimizer, DistroResult
from ..model import lm_loss

# (model, a (batch, seq_len) token tensor) -> scalar loss
LossFn = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


def train_step(
    model: torch.nn.Module,
    optimizer: DistroOptimizer,
    step: int,
    batch: BatchId,
    sequences: torch.Tensor,
    micro_batch_size: int | None = None,
    loss_fn: LossFn = lm_loss,
    before_chunk: Callable[[], None] | None = None,
) -> tuple[DistroResult, float]:
    """One trainer step — runtime.LocalReplica.train runs exactly this, so trainer and verifier share the
    code path: lookahead, forward and backward over micro-batches (each loss weighted by its share of the
    batch), generate. `before_chunk` runs before each micro-batch (the trainer's abort point: it may
    raise; the caller then abandons the step). Returns the result and the mean loss."""
    size = micro_batch_size or len(sequences)
    optimizer.lookahead(step)
    total = 0.0
    for chunk in sequences.split(size):
        if before_chunk is not None:
            before_chunk()
        loss = loss_fn(model, chunk)
        (loss * (len(chunk) / len(sequences))).backward()
        total += float(loss.detach()) * len(chunk)
    result = optimizer.generate(step, batch)
    model.zero_grad(set_to_none=True)
    return result, total / len(sequences)
