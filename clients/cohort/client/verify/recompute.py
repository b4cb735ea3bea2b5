"""Replay one training step of a trainer from the inputs it committed to.

Inputs of step s of trainer X: the weights every replica held at the start of step s (after
the apply of step s - 2's results, before X's lookahead), X's optimizer state after step s - 1
(checked against the hash X published with its step s - 1 result), X's assigned batch, and the
run's DisTrO config and LR schedule. The replay runs the very code a trainer runs
(`training.train_step`: lookahead, forward/backward in micro-batches, generate, encode), so on
the same machine and thread count an honest step reproduces bit for bit; elsewhere it differs
only by the rounding of one step's gradient.

A member replays on its own model and optimizer between its jobs (`Replayer.borrowing`, with the weights
read from its snapshot on disk), so a check needs no second replica; a `Replayer` of its own (a scratch
model) serves studies and tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from ..distro import BatchId, DistroConfig, DistroOptimizer, DistroResult, WireCodec
from ..distro.schedule import Schedule
from ..model import lm_loss
from ..training import LossFn, train_step
from .state import OptimizerState, capture, restore


def snapshot_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the model's parameters by name: what a verifier keeps per recent step."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@dataclass(frozen=True)
class StepInputs:
    """What a replay of trainer X's step needs (the state already checked against its hash)."""

    step: int
    batch: BatchId
    # every replica's parameters at the start of `step`: by name, or a loader that puts them into a model
    weights: Mapping[str, torch.Tensor] | Callable[[torch.nn.Module], None]
    # X's state after step - 1, or what a check restores of it (the sign plane and its sampled bands)
    state_before: OptimizerState | Callable[[DistroOptimizer], None]


@dataclass(frozen=True)
class Replay:
    result: DistroResult
    payload: bytes
    state_after: (
        OptimizerState  # shares the replayer's optimizer tensors: read before its next replay
    )
    loss: float
    seconds: float


class Replayer:
    """A scratch replica (own model and DistroOptimizer of the run's config) that replays steps.

    `model` must be of the run's architecture; its weights are overwritten at every replay."""

    def __init__(
        self,
        model: torch.nn.Module,
        config: DistroConfig,
        lr: Schedule,
        micro_batch_size: int | None = None,
        loss_fn: LossFn = lm_loss,
    ) -> None:
        self.model = model
        self.model.train()
        self.optimizer = DistroOptimizer(model.named_parameters(), config, lr)
        self.micro_batch_size = micro_batch_size
        self.loss_fn = loss_fn

    @classmethod
    def borrowing(
        cls,
        model: torch.nn.Module,
        optimizer: DistroOptimizer,
        micro_batch_size: int | None = None,
        loss_fn: LossFn = lm_loss,
    ) -> Replayer:
        """A replayer over a member's own model and optimizer: the caller saves and restores their
        weights and state around the replay (see runtime/trainer.py)."""
        replayer = cls.__new__(cls)
        replayer.model, replayer.optimizer = model, optimizer
        replayer.micro_batch_size, replayer.loss_fn = micro_batch_size, loss_fn
        return replayer

    @property
    def codec(self) -> WireCodec:
        return self.optimizer.codec

    def replay(self, inputs: StepInputs, sequences: torch.Tensor) -> Replay:
        """Recompute trainer X's step from `inputs` on `sequences` (X's assigned batch)."""
        started = time.perf_counter()
        if callable(inputs.weights):
            inputs.weights(self.model)
        else:
            params = dict(self.model.named_parameters())
            if set(params) != set(inputs.weights):
                raise ValueError("the weights do not name this model's parameters")
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(inputs.weights[name])
        self.model.zero_grad(set_to_none=True)
        if callable(inputs.state_before):
            inputs.state_before(self.optimizer)
        else:
            restore(self.optimizer, inputs.state_before)
        device = next(self.model.parameters()).device
        result, loss = train_step(
            self.model,
            self.optimizer,
            inputs.step,
            inputs.batch,
            sequences.to(device),
            self.micro_batch_size,
            self.loss_fn,
        )
        payload = self.codec.encode(result)
        state_after = capture(self.optimizer, inputs.step, copy=False)
        return Replay(result, payload, state_after, loss, time.perf_counter() - started)
