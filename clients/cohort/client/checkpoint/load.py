"""Loading a checkpoint, only after its manifest hash matches the one the caller trusts.

The hash is checked by streaming every file through sha256 in manifest chunks; the weights are then
read a tensor at a time straight into the model's parameters (`tensorfile.read_into`), from one file
or from the shards its index names, so a load needs no memory beyond the model's own (plus one
tensor's buffer where the checkpoint's dtype or device differs from the parameter's).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from .layout import (
    SHARD_INDEX,
    SINGLE_SHARD,
    CheckpointError,
    CheckpointInfo,
    CheckpointMeta,
    verify,
)
from .tensorfile import TensorEntry, TensorFileError, read_file, read_header, read_into

MAX_INDEX_BYTES = 64 << 20

Progress = Callable[[int, int], None]
"""Called with (bytes read, total bytes) while weights are loaded."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    model: PreTrainedModel
    meta: CheckpointMeta
    info: CheckpointInfo


def load_checkpoint(
    path: str | Path, expected_hash: bytes, *, device: str | torch.device = "cpu"
) -> LoadedCheckpoint:
    """Verify the directory against `expected_hash`, then build the model it holds.

    The model comes from `transformers.AutoModelForCausalLM.from_pretrained`, in the saved dtype
    (it maps the safetensors files and copies nothing up front, so this too stays near the model's
    own size).
    """
    path = Path(path)
    verify(path, expected_hash)
    meta = CheckpointMeta.read(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: transformers cannot load it: {e}") from None
    return LoadedCheckpoint(model.to(device), meta, CheckpointInfo(path, expected_hash, meta.step))


def load_weights(
    model: torch.nn.Module,
    path: str | Path,
    expected_hash: bytes,
    *,
    progress: Progress | None = None,
) -> CheckpointMeta:
    """Verify the directory, then read its weights into `model` in place (the optimizer keeps its
    references to the parameters). Every parameter must be in the checkpoint, same shape; names and
    shapes are checked against the files' headers before any weight changes."""
    path = Path(path)
    verify(path, expected_hash)
    meta = CheckpointMeta.read(path)
    files = tensor_files(path)
    params: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
    buffers: dict[str, torch.Tensor] = dict(model.named_buffers())
    plan: dict[Path, list[tuple[TensorEntry, torch.Tensor]]] = {}
    filled: set[int] = set()
    for file, entries in files.items():
        for name, entry in entries.items():
            target = params.get(name, buffers.get(name))
            if target is None or id(target) in filled:  # a tied weight stored under both names
                continue
            if entry.shape != tuple(target.shape):
                raise CheckpointError(
                    f"{name}: checkpoint shape {entry.shape} != {tuple(target.shape)}"
                )
            filled.add(id(target))
            plan.setdefault(file, []).append((entry, target))
    missing = [n for n, p in model.named_parameters() if id(p) not in filled]
    if missing:
        raise CheckpointError(f"{path}: no weights for {missing[:3]} (other model?)")
    total = sum(e.nbytes for pairs in plan.values() for e, _ in pairs)
    done = 0

    def read(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    try:
        for file, pairs in plan.items():
            read_into(file, pairs, progress=read)
    except (OSError, TensorFileError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    return meta


def tensor_files(path: str | Path) -> dict[Path, dict[str, TensorEntry]]:
    """The safetensors files of a checkpoint directory (one, or the shards its index names), each
    with the tensors its header lists; only headers are read."""
    path = Path(path)
    try:
        if (path / SINGLE_SHARD).is_file():
            return {path / SINGLE_SHARD: read_header(path / SINGLE_SHARD)}
        weight_map = _weight_map(path)
        files: dict[Path, dict[str, TensorEntry]] = {}
        for name in sorted(set(weight_map.values())):
            shard = path / name
            if "/" in name or not shard.is_file():
                raise CheckpointError(
                    f"{path / SHARD_INDEX}: shard {name!r} is not a file of the checkpoint"
                )
            files[shard] = read_header(shard)
    except (OSError, TensorFileError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    for tensor, name in weight_map.items():
        if tensor not in files[path / name]:
            raise CheckpointError(f"{path / SHARD_INDEX}: {tensor!r:.80} is not in {name}")
    return files


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint directory as new CPU tensors: the whole checkpoint in memory, so
    for small ones and tools; a model loads with `load_weights`, a tensor at a time."""
    tensors: dict[str, torch.Tensor] = {}
    for file in tensor_files(path):
        try:
            tensors.update(read_file(file))
        except (OSError, TensorFileError) as e:
            raise CheckpointError(f"{path}: {e}") from None
    return tensors


def _weight_map(path: Path) -> dict[str, str]:
    index_path = path / SHARD_INDEX
    try:
        with open(index_path, "rb") as f:
            raw = f.read(MAX_INDEX_BYTES + 1)
        weight_map = json.loads(raw)["weight_map"]
        if (
            len(raw) > MAX_INDEX_BYTES
            or not isinstance(weight_map, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items())
        ):
            raise ValueError("index too large, or weight_map is not an object of names")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(
            f"{path}: no {SINGLE_SHARD} and no usable {SHARD_INDEX} ({e})"
        ) from None
    return weight_map
