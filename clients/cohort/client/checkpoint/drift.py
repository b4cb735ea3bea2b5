"""Replica drift: compare this replica's weights with the checkpoint's, reload if they differ.

Replicas are bit-identical on one platform, but different GPUs or BLAS builds can flip the sign
of a near-zero update and drift apart. At an epoch end the client compares its parameter digest
with the digest the epoch's checkpoint records and, if they differ, copies the checkpoint's
weights into its model before the next epoch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from ..model.digest import parameter_digest
from .layout import CheckpointMeta
from .load import load_weights

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DriftCheck:
    local_digest: str  # before any repair
    checkpoint_digest: str
    reloaded: bool

    @property
    def drifted(self) -> bool:
        return self.local_digest != self.checkpoint_digest


def repair_drift(
    model: torch.nn.Module, checkpoint: str | Path, manifest_hash: bytes
) -> DriftCheck:
    """Reload `checkpoint` (verified against `manifest_hash`) into `model` if their digests differ."""
    checkpoint = Path(checkpoint)
    expected = CheckpointMeta.read(checkpoint).parameter_digest
    local = parameter_digest(model)
    if local == expected:
        return DriftCheck(local, expected, reloaded=False)
    log.warning(
        "replica drift: parameter digest %s… differs from checkpoint step %s (%s…); reloading",
        local[:16],
        checkpoint.name,
        expected[:16],
    )
    load_weights(model, checkpoint, manifest_hash)
    after = parameter_digest(model)
    if after != expected:
        raise RuntimeError(
            f"{checkpoint}: reloaded weights have digest {after[:16]}…, not {expected[:16]}…"
        )
    return DriftCheck(local, expected, reloaded=True)
