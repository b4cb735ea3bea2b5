"""The yardstick: one process, AdamW, the whole global batch of every step (same tokens as the
simulated replicas together), used to judge DisTrO's loss parity."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .result import BatchId
from .schedule import Schedule
from .simulator import LossFn, SimulationLog, StepHook, StepRecord


def train_adamw(
    model: torch.nn.Module,
    steps: int,
    lr: Schedule,
    sequences: Callable[[BatchId], torch.Tensor],
    global_batch: int,
    loss_fn: LossFn,
    betas: tuple[float, float] = (0.9, 0.95),
    weight_decay: float = 0.1,
    clip_grad_norm: float | None = 1.0,
    hook: StepHook | None = None,
) -> SimulationLog:
    """Train `model` in place with AdamW on global batch t = sequences [t*B, (t+1)*B) at step t."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr(0), betas=betas, weight_decay=weight_decay
    )
    log = SimulationLog()
    for t in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr(t)
        loss = loss_fn(model, sequences(BatchId(t * global_batch, (t + 1) * global_batch)))
        loss.backward()
        if clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        log.steps.append(StepRecord(t, float(loss.detach()), 0))
        if hook is not None:
            hook(t, [model])
    return log
