"""Yardsticks. `train_adamw`: one process, AdamW, the whole global batch of every step (same tokens
as the simulated replicas together), used to judge DisTrO's loss parity. `reference_coefficients`
and `demo_coefficients`: plain float64 loops over the results for the aggregation rule we use
(aggregate.py) and for DeMo's / Psyche's scatter-mean, written independently of aggregate.py's
fast paths (distro/aggregate.py) so tests can hold them against each other."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..distro.compress import densify
from ..distro.dct import decode
from ..distro.layout import Layout
from ..distro.result import BatchId, ReceivedResult
from ..distro.schedule import Schedule
from ..training import LossFn
from .simulator import SimulationLog, StepHook, StepRecord


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


def reference_coefficients(
    layout: Layout, received: Sequence[ReceivedResult]
) -> list[torch.Tensor]:
    """Per bucket, dense float64 (num_tiles, totalk): (1/N) * sum over results of the result's
    dense tile coefficients divided by that tile's max |value| (our rule, aggregate.py)."""
    out = []
    for i, b in enumerate(layout.buckets):
        total = torch.zeros(b.num_tiles, b.totalk, dtype=torch.float64)
        for r in received:
            tiles = r.result.tiles[i]
            dense = densify(tiles, b.totalk).double()
            scale = dense.abs().max(dim=1, keepdim=True).values
            total += dense / torch.where(scale > 0, scale, torch.ones_like(scale))
        out.append(total / len(received))
    return out


def demo_coefficients(layout: Layout, received: Sequence[ReceivedResult]) -> list[torch.Tensor]:
    """Per bucket, dense float64 (num_tiles, totalk) as DeMo's `batch_decompress` and Psyche's
    `apply` compute it: one scatter-mean over all results' picks, the raw values, so a
    coefficient picked by j results is the mean of those j values (not divided by N)."""
    out = []
    for i, b in enumerate(layout.buckets):
        indices = torch.cat([r.result.tiles[i].indices for r in received], dim=1)
        values = torch.cat([r.result.tiles[i].values for r in received], dim=1).double()
        dense = torch.zeros(b.num_tiles, b.totalk, dtype=torch.float64)
        out.append(dense.scatter_reduce(1, indices, values, reduce="mean", include_self=False))
    return out


def reference_signs(layout: Layout, coefficients: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """sign(IDCT) of per-bucket dense coefficients, in float64, stacked like each bucket."""
    return [
        decode(c, b.tile, b.stacked_shape, layout.transform).sign()
        for b, c in zip(layout.buckets, coefficients, strict=True)
    ]
