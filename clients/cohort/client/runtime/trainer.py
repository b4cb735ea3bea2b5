"""One replica of the run's model: build it from the run's TrainingSpec, train a batch, apply a round.

Blocking torch code, called from the loop through a worker thread (never two calls at once), so the event
loop keeps gossiping and fetching while a step computes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from cohort.sdk.presets import DistroSpec, LrSpec, TrainingSpec

from ..checkpoint import load_weights
from ..data import BatchId, DataProvider, open_data_location
from ..distro import (
    Constant,
    Cosine,
    DistroConfig,
    DistroOptimizer,
    DistroResult,
    Linear,
    WarmupStableDecay,
)
from ..model import EvalResult, build_model, config_for, evaluate, lm_loss, parameter_digest


def distro_config(spec: DistroSpec) -> DistroConfig:
    return DistroConfig(
        compression_decay=spec.compression_decay,
        compression_chunk=spec.compression_chunk,
        compression_topk=spec.compression_topk,
        weight_decay=spec.weight_decay,
        clip_grad_norm=spec.clip_grad_norm,
        quantize_1bit=spec.quantize_1bit,
        value_dtype=spec.value_dtype,  # type: ignore[arg-type]
        error_feedback=spec.error_feedback,  # type: ignore[arg-type]
    )


def lr_schedule(spec: LrSpec):
    if spec.kind == "Constant":
        return Constant(spec.base_lr, warmup_steps=spec.warmup_steps)
    if spec.kind in ("Linear", "Cosine"):
        kind = Linear if spec.kind == "Linear" else Cosine
        return kind(spec.base_lr, total_steps=spec.total_steps, final_lr=spec.final_lr,
                    warmup_steps=spec.warmup_steps)  # fmt: skip
    if spec.kind == "WarmupStableDecay":
        decay = max(spec.total_steps - spec.warmup_steps - spec.stable_steps, 0)
        return WarmupStableDecay(spec.base_lr, spec.warmup_steps, spec.stable_steps, decay,
                                 spec.final_lr, 0, spec.final_lr)  # fmt: skip
    raise ValueError(f"unknown learning-rate schedule {spec.kind!r}")


def initial_seed(run_address: bytes) -> int:
    """The seed every client derives the first epoch's weights from: the run's own address."""
    return int.from_bytes(hashlib.sha256(b"cohort/initial-weights/v1" + run_address).digest()[:8], "little") >> 1


def open_dataset(spec: TrainingSpec, split: str = "train") -> DataProvider:
    """The run's sequences from its `data_location` (a built-in corpus, prepared shards on disk or over
    HTTP, a data server), checked against the run's vocabulary; "validation" is the held-out split."""
    return open_data_location(spec.data_location, spec.max_seq_len, vocab_size=spec.vocab_size, split=split)


@dataclass(frozen=True)
class StepOutput:
    payload: bytes
    loss: float
    tokens: int
    seconds: float


class Trainer:
    """The model, its DisTrO optimizer and the data, for one client."""

    def __init__(self, spec: TrainingSpec, *, seed: int, device: str = "cpu",
                 micro_batch_size: int | None = None) -> None:  # fmt: skip
        self.spec = spec
        self.device = torch.device(device)
        self.micro_batch_size = micro_batch_size
        config = config_for(spec.architecture, spec.hf_config, vocab_size=spec.vocab_size,
                            max_seq_len=spec.max_seq_len)  # fmt: skip
        self.model = build_model(config, seed=seed, device=self.device)
        self.model.train()
        self.optimizer = DistroOptimizer(
            self.model.named_parameters(), distro_config(spec.distro), lr_schedule(spec.lr)
        )
        self.data = open_dataset(spec)
        self.validation = open_dataset(spec, split="validation")

    @property
    def codec(self):
        return self.optimizer.codec

    def train(self, step: int, start: int, end: int) -> StepOutput:
        """Forward/backward over the batch [start, end) in micro-batches, then DisTrO's compressed result."""
        started = time.perf_counter()
        batch = BatchId(start, end)
        sequences = self.data.sequences(batch).to(self.device)
        size = self.micro_batch_size or len(sequences)
        self.optimizer.lookahead(step)
        total = 0.0
        for chunk in sequences.split(size):
            loss = lm_loss(self.model, chunk)
            (loss * (len(chunk) / len(sequences))).backward()
            total += float(loss.detach()) * len(chunk)
        result = self.optimizer.generate(step, batch)
        self.model.zero_grad(set_to_none=True)
        payload = self.codec.encode(result)
        return StepOutput(payload, total / len(sequences), sequences.numel(), time.perf_counter() - started)

    def apply(self, step: int, payloads: Sequence[bytes]) -> None:
        """Sign-SGD along the aggregate of the round's accepted results (every replica: the same bits)."""
        self.optimizer.apply(step, [self.codec.decode(p) for p in payloads])

    def check(self, payload: bytes) -> DistroResult:
        """The result in `payload`; WireError unless it is a valid result for this run's model."""
        return self.codec.decode(payload).result

    def evaluate(self, max_sequences: int) -> EvalResult:
        """Held-out loss on the first `max_sequences` of the validation split (the same ones everywhere)."""
        return evaluate(self.model, self.validation, max_sequences)

    def digest(self) -> str:
        return parameter_digest(self.model)

    def load(self, path: Path, manifest_hash: bytes) -> None:
        """The weights of a verified checkpoint, with fresh momentum (a cold start for this replica:
        DisTrO's error feedback is never checkpointed, psyche-reference 3.6)."""
        load_weights(self.model, path, manifest_hash)
        self.optimizer.reset_momentum()
