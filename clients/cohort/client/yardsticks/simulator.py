"""Data-parallel DisTrO in one process: N replicas, own data shards, real wire bytes, 2-step pipeline.

Round t for every replica r (as a client does it, psyche-reference 3.4):
    apply the payloads of step t - 2 (decoded by r itself from the bytes every replica sent)
    lookahead, forward/backward on r's shard of global batch t, generate, encode -> bytes
After the last step two flush rounds only apply, so every result is applied exactly once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..data.batch import split_batch
from ..distro.config import DistroConfig
from ..distro.optimizer import DistroOptimizer
from ..distro.result import BatchId
from ..distro.schedule import Schedule
from ..training import LossFn  # (replica's model, its shard's sequences) -> scalar loss

# called after each round with (step, the replicas' models)
StepHook = Callable[[int, list[torch.nn.Module]], None]


@dataclass
class StepRecord:
    step: int
    train_loss: float  # mean over replicas of their shard loss
    payload_bytes: int  # one replica's payload (all are the same size)


@dataclass
class SimulationLog:
    steps: list[StepRecord] = field(default_factory=list)


@dataclass
class Shards:
    """Global batch t = sequences [t * size, (t + 1) * size), split into consecutive shards."""

    global_batch: int
    replicas: int

    def __call__(self, step: int) -> list[BatchId]:
        return split_batch(step * self.global_batch, self.global_batch, self.replicas)


class DataParallelSimulator:
    """N DisTrO replicas of one model, exchanging encoded payloads each round."""

    def __init__(
        self,
        model: torch.nn.Module,
        replicas: int,
        config: DistroConfig,
        lr: Schedule,
        sequences: Callable[[BatchId], torch.Tensor],
        global_batch: int,
        loss_fn: LossFn,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        if global_batch < replicas:
            raise ValueError(f"a global batch of {global_batch} cannot feed {replicas} replicas")
        self.models = [copy.deepcopy(model) for _ in range(replicas)]
        self.optimizers = [DistroOptimizer(m.named_parameters(), config, lr) for m in self.models]
        self.sequences = sequences
        self.shards = Shards(global_batch, replicas)
        self.loss_fn = loss_fn
        self.log = SimulationLog()
        self._in_flight: dict[int, list[bytes]] = {}  # step -> every replica's payload
        self.step = 0

    def run(self, steps: int, hook: StepHook | None = None) -> SimulationLog:
        """Train `steps` rounds from the current step, then flush the pipeline."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        for _ in range(steps):
            self._round(train=True)
            if hook is not None:
                hook(self.step - 1, self.models)
        self.flush()
        return self.log

    def flush(self) -> None:
        """Apply the results still in flight (the last two rounds of an epoch only apply)."""
        while self._in_flight:
            self._round(train=False)

    def _round(self, train: bool) -> None:
        t = self.step
        arrived = self._in_flight.pop(t - 2, None)
        payloads, losses = [], []
        shards = self.shards(t) if train else []
        for r, (model, opt) in enumerate(zip(self.models, self.optimizers, strict=True)):
            if arrived is not None:
                opt.apply(t, [opt.codec.decode(p) for p in arrived])
            if not train:
                continue
            opt.lookahead(t)
            tokens = self.sequences(shards[r])
            loss = self.loss_fn(model, tokens)
            loss.backward()
            payloads.append(opt.codec.encode(opt.generate(t, shards[r])))
            model.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        if train:
            self._in_flight[t] = payloads
            self.log.steps.append(StepRecord(t, sum(losses) / len(losses), len(payloads[0])))
        self.step += 1
