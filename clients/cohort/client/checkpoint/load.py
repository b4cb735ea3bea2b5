"""Loading a checkpoint, only after its manifest hash matches the one the caller trusts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, PreTrainedModel

from .layout import (
    SHARD_INDEX,
    SINGLE_SHARD,
    CheckpointError,
    CheckpointInfo,
    CheckpointMeta,
    verify,
)

MAX_INDEX_BYTES = 64 << 20


@dataclass(frozen=True)
class LoadedCheckpoint:
    model: PreTrainedModel
    meta: CheckpointMeta
    info: CheckpointInfo


def load_checkpoint(
    path: str | Path, expected_hash: bytes, *, device: str | torch.device = "cpu"
) -> LoadedCheckpoint:
    """Verify the directory against `expected_hash`, then build the model it holds.

    The model comes from `transformers.AutoModelForCausalLM.from_pretrained`, in the saved dtype.
    """
    path = Path(path)
    verify(path, expected_hash)
    meta = CheckpointMeta.read(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: transformers cannot load it: {e}") from None
    return LoadedCheckpoint(model.to(device), meta, CheckpointInfo(path, expected_hash, meta.step))


def load_weights(model: torch.nn.Module, path: str | Path, expected_hash: bytes) -> CheckpointMeta:
    """Verify the directory, then copy its weights into `model` in place (the optimizer keeps
    its references to the parameters). Every parameter must be in the checkpoint, same shape."""
    path = Path(path)
    verify(path, expected_hash)
    meta = CheckpointMeta.read(path)
    saved = read_tensors(path)
    filled: set[int] = set()
    with torch.no_grad():
        for name, p in model.named_parameters(remove_duplicate=False):
            t = saved.get(name)
            if t is None:
                continue
            if t.shape != p.shape:
                raise CheckpointError(f"{name}: checkpoint shape {tuple(t.shape)} != {tuple(p.shape)}")
            p.copy_(t)
            filled.add(id(p))
        missing = [n for n, p in model.named_parameters() if id(p) not in filled]
        if missing:
            raise CheckpointError(f"{path}: no weights for {missing[:3]} (other model?)")
        for name, b in model.named_buffers():
            if name in saved:
                b.copy_(saved[name])
    return meta


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint directory (single file or sharded with an index)."""
    path = Path(path)
    if (path / SINGLE_SHARD).is_file():
        return load_file(path / SINGLE_SHARD)
    index_path = path / SHARD_INDEX
    try:
        raw = index_path.read_bytes()[: MAX_INDEX_BYTES + 1]
        weight_map = json.loads(raw)["weight_map"]
        files = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: no {SINGLE_SHARD} and no usable {SHARD_INDEX} ({e})") from None
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        shard = path / name
        if not isinstance(name, str) or "/" in name or not shard.is_file():
            raise CheckpointError(f"{index_path}: shard {name!r} is not a file of the checkpoint")
        tensors.update(load_file(shard))
    return tensors
