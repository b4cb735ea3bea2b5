"""Loss parity experiment: DisTrO replicas vs single-process AdamW on the same tokens.

Every contender sees global batch t = the same sequences at step t: AdamW takes it whole, the
DisTrO replicas split it into shards. A third contender, sign-SGD at the same bytes, is the
same simulator with the DCT replaced by the identity (top-k of the raw momentum, 1-bit).
Used by the CI parity test (small) and by benchmarks/distro/parity.py (long, with a plot).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..data import ByteTokenizer, TokenDataset, load_corpus
from ..distro.config import DistroConfig
from ..distro.schedule import Cosine
from ..model import build_model, config_for, evaluate, llama_config, lm_loss, parameter_digest
from .reference import train_adamw
from .simulator import DataParallelSimulator


@dataclass(frozen=True)
class ParitySetup:
    model: str = "tiny"  # a Llama preset of cohort.client.model.PRESETS, unless hf_config is set
    architecture: str = "HfLlama"  # with hf_config: any architecture of cohort.client.model
    hf_config: Mapping[str, Any] | None = None
    corpus: str = "kjv"
    seq_len: int = 64
    replicas: int = 4
    batch_per_replica: int = 8
    steps: int = 200
    warmup_steps: int = 20
    adamw_lr: float = 2e-3  # the best of 1e-3 / 2e-3 / 3e-3 for AdamW on this setup
    # of 2e-3 / 3e-3 / 4e-3 at 600 steps: 1.079x / 1.074x / 1.081x AdamW; at 2,000 steps 1.038x
    distro_lr: float = 3e-3
    final_lr_fraction: float = 0.1
    distro: DistroConfig = field(
        # a tiny model has small matrices: 32x32 tiles, top-16 (1/64 of the coefficients), 1-bit
        default_factory=lambda: DistroConfig(compression_chunk=32, compression_topk=16)
    )
    eval_sequences: int = 256
    eval_every: int = 0  # 0: only at the end
    seed: int = 0

    @property
    def global_batch(self) -> int:
        return self.replicas * self.batch_per_replica


@dataclass
class Curve:
    name: str
    steps: list[int] = field(default_factory=list)
    heldout: list[float] = field(default_factory=list)
    train: list[float] = field(default_factory=list)
    final: float = float("nan")
    bytes_per_step: int = 0  # one client's upload
    seconds: float = 0.0
    replica_digests: int = 1  # distinct weight fingerprints across replicas at the end


@dataclass
class ParityReport:
    setup: ParitySetup
    unigram: float
    curves: dict[str, Curve]


def run_parity(
    setup: ParitySetup, contenders: tuple[str, ...] = ("adamw", "distro")
) -> ParityReport:
    """Train each contender from the same initial weights; report held-out loss curves."""
    unknown = set(contenders) - {"adamw", "distro", "signsgd"}
    if unknown:
        raise ValueError(
            f"unknown contenders {sorted(unknown)}; choose from adamw, distro, signsgd"
        )
    tokenizer = ByteTokenizer()
    dataset = TokenDataset(
        tokenizer.encode(load_corpus(setup.corpus)), setup.seq_len, seed=setup.seed
    )
    heldout = dataset.heldout_batches(64, setup.eval_sequences)
    if setup.hf_config is None:
        config = llama_config(
            setup.model, vocab_size=tokenizer.vocab_size, max_seq_len=setup.seq_len
        )
    else:
        config = config_for(
            setup.architecture,
            setup.hf_config,
            vocab_size=tokenizer.vocab_size,
            max_seq_len=setup.seq_len,
        )
    curves = {}
    for name in contenders:
        curve = Curve(name)
        model = build_model(config, seed=setup.seed)
        lr = _schedule(setup, setup.adamw_lr if name == "adamw" else setup.distro_lr)

        def hook(step: int, models: list[torch.nn.Module], curve: Curve = curve) -> None:
            if setup.eval_every and (step + 1) % setup.eval_every == 0 and step + 1 < setup.steps:
                curve.steps.append(step + 1)
                curve.heldout.append(evaluate(models[0], heldout).loss)

        started = time.perf_counter()
        if name == "adamw":
            log = train_adamw(
                model, setup.steps, lr, dataset.sequences, setup.global_batch, lm_loss, hook=hook
            )
            models = [model]
        else:
            distro = setup.distro
            if name == "signsgd":
                distro = dataclasses.replace(distro, transform="identity")
            sim = DataParallelSimulator(
                model, setup.replicas, distro, lr, dataset.sequences, setup.global_batch, lm_loss
            )
            log = sim.run(setup.steps, hook=hook)
            models = sim.models
            curve.bytes_per_step = log.steps[0].payload_bytes
            curve.replica_digests = len({parameter_digest(m) for m in models})
        curve.seconds = time.perf_counter() - started
        curve.train = [r.train_loss for r in log.steps]
        curve.final = evaluate(models[0], heldout).loss
        curve.steps.append(setup.steps)
        curve.heldout.append(curve.final)
        curves[name] = curve
    return ParityReport(setup, dataset.unigram_loss(tokenizer.vocab_size), curves)


def _schedule(setup: ParitySetup, base_lr: float) -> Cosine:
    return Cosine(
        base_lr,
        total_steps=setup.steps,
        final_lr=base_lr * setup.final_lr_fraction,
        warmup_steps=setup.warmup_steps,
    )
