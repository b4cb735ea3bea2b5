"""A SYNTHETIC trainer for protocol tests at scale (`cohort train --synthetic`): the same chain, P2P and
transactions as a real client, but no forward/backward pass. Each "result" is a payload of exactly the size
the run's real model and DisTrO config would send (so fetches, uploads and bytes on the wire are real),
made of a header and pseudo-random bytes; applying a step folds the applied results' commitments into a
tiny stand-in model, so replicas that apply the same lists hold the same weights (the per-round digest,
epoch-end checkpoints and joiners' loading all work as with a real model). Nothing it computes is
training: use it to measure rounds, bytes and RPC load with many clients, never for a loss.

    payload  magic "SYN1" | step u64 | batch_start u64 | batch_end u64 | filler (the real size in all)
"""

from __future__ import annotations

import hashlib
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from cohort.sdk.presets import MODEL_PRESETS, TrainingSpec

from ..checkpoint import load_weights
from ..distro import DistroOptimizer
from ..model import EvalResult, build_model, config_for, parameter_digest, weights_checksum
from .replica import Aborted, PayloadHeader, StepOutput
from .trainer import distro_config, lr_schedule

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ..checkpoint import CheckpointInfo, CheckpointWriter
    from ..verify import Verdict

MAGIC = b"SYN1"
_HEAD = struct.Struct("<4sQQQ")
STAND_IN = "llama-tiny"  # the stand-in model checkpoints are made of (a few MB)


def real_payload_size(spec: TrainingSpec) -> int:
    """The size of a real result of this run: its model's DisTrO layout, planned on the meta device (no
    weights are allocated)."""
    config = config_for(
        spec.architecture, spec.hf_config, vocab_size=spec.vocab_size, max_seq_len=spec.max_seq_len
    )
    model = build_model(config, device="meta")
    return DistroOptimizer(
        model.named_parameters(), distro_config(spec.distro), lr_schedule(spec.lr)
    ).codec.size


class SyntheticReplica:
    """A `Replica` (replica.py) without training (see the module docstring)."""

    def __init__(self, spec: TrainingSpec, *, seed: int, device: str = "cpu", micro_batch_size: int | None = None,
                 seconds_per_sequence: float = 0.0) -> None:  # fmt: skip
        self.spec = spec
        self.device = torch.device("cpu")
        self.seconds_per_sequence = seconds_per_sequence
        self.payload_size = max(real_payload_size(spec), _HEAD.size)
        stand_in = config_for(
            "HfLlama",
            MODEL_PRESETS[STAND_IN].hf_config,
            vocab_size=256,
            max_seq_len=spec.max_seq_len,
        )
        self.model = build_model(stand_in, seed=seed)

    def start_epoch(self, start_step: int, cold: bool, verified: bool = False) -> None:
        pass

    state_manifest_limit = 0

    def check_parts(self, seed: bytes, before: bytes, after: bytes) -> list[bytes]:
        return []  # never asked: can_verify is false

    def can_verify(self, step: int) -> bool:
        return False  # nothing is trained, so nothing can be replayed

    def holding(self, step: int) -> AbstractContextManager[bool]:
        return nullcontext(False)  # nothing to hold

    def verify_step(self, step: int, published: bytes, previous: bytes, seed: bytes, state_before: bytes,
                    before_parts: Mapping[bytes, bytes], state_after: bytes,
                    after_parts: Mapping[bytes, bytes]) -> Verdict | None:  # fmt: skip
        return None  # the same: no weights to replay from (can_verify says so before any fetch)

    def train(
        self, step: int, start: int, end: int, abort: threading.Event | None = None
    ) -> StepOutput:
        started = time.perf_counter()
        deadline = started + self.seconds_per_sequence * (
            end - start
        )  # compute grows with the batch
        while time.perf_counter() < deadline:  # stands in for the compute, abortable like it
            if abort is not None and abort.is_set():
                raise Aborted(f"synthetic step {step} stopped")
            time.sleep(min(0.05, max(deadline - time.perf_counter(), 0)))
        head = _HEAD.pack(MAGIC, step, start, end)
        seed = hashlib.sha256(
            head + bytes(self.model.model.embed_tokens.weight.data[0, :4].numpy())
        ).digest()
        filler = (seed * (self.payload_size // 32 + 1))[: self.payload_size - len(head)]
        tokens = (end - start) * self.spec.max_seq_len
        return StepOutput(head + filler, 0.0, tokens, max(time.perf_counter() - started, 1e-6))

    def check(self, payload: bytes) -> PayloadHeader:
        if len(payload) != self.payload_size or not payload.startswith(MAGIC):
            raise ValueError(f"not a synthetic result of {self.payload_size} bytes")
        _, step, start, end = _HEAD.unpack_from(payload)
        return PayloadHeader(step, (start, end))

    @torch.no_grad()
    def apply(self, step: int, payloads: Sequence[bytes]) -> None:
        """Fold the applied results into the stand-in's first weights: the same lists, the same bits."""
        digest = hashlib.sha256(
            struct.pack("<Q", step) + b"".join(hashlib.sha256(p).digest() for p in payloads)
        )
        delta = torch.frombuffer(bytearray(digest.digest()[:16]), dtype=torch.int8).float() / 1e4
        self.model.model.embed_tokens.weight.data[0, :16] += delta

    def evaluate(self, max_sequences: int) -> EvalResult:
        return EvalResult(loss=0.0, perplexity=1.0, tokens=0)

    def digest(self) -> str:
        return parameter_digest(self.model)

    def checksum(self) -> int:
        return weights_checksum(self.model)

    def checkpoint(
        self, writer: CheckpointWriter, *, run_id: str, step: int, epoch: int
    ) -> Future[CheckpointInfo]:
        return writer.submit(self.model, run_id=run_id, step=step, epoch=epoch)

    def load(self, path: Path, manifest_hash: bytes) -> None:
        load_weights(self.model, path, manifest_hash)
