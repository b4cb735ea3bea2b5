"""Saving a checkpoint: snapshot the weights (fast, on the caller's thread), write them atomically.

The write goes to a hidden temp directory next to the final one and is renamed into place only
when every file is complete and fsync'd, so a crash mid-save leaves the previous checkpoints as they
were (and a stray `.tmp-save-*` directory that the next save removes).

Weights are written in the model's own dtype, as Hugging Face shards (`model.safetensors`, or
`model-0000k-of-0000n.safetensors` of at most `max_shard_bytes` each plus `model.safetensors.index.json`),
each tensor streamed from its memory (`tensorfile`). Memory on top of the model: `save_checkpoint`
writes from the live parameters (blocking; one tensor at a time for the digest, or for a copy off an
accelerator); a background save (`snapshot` + `write_checkpoint`, the CheckpointWriter) needs one copy
of the weights, since training goes on meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from transformers import PretrainedConfig

from ..model.digest import tensors_digest
from .layout import (
    COHORT_FILE,
    SHARD_INDEX,
    SINGLE_SHARD,
    CheckpointError,
    CheckpointInfo,
    CheckpointMeta,
    manifest_hash,
)
from .tensorfile import write_file

TEMP_PREFIX = (
    ".tmp-save-"  # only the writer's own leftovers are removed (a fetch may share the root)
)
DEFAULT_MAX_SHARD_BYTES = 2 << 30
WEIGHTS_METADATA = {"format": "pt"}  # what transformers expects in a safetensors header
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

Progress = Callable[[int, int], None]
"""Called with (bytes written, total bytes) while a checkpoint is written."""


class SavesFiles(Protocol):
    """A tokenizer that can write its files (tokenizer.json, ...) into a checkpoint directory."""

    def save(self, directory: Path) -> None: ...


@dataclass(frozen=True)
class Snapshot:
    """Everything a checkpoint needs: copied off the live model (training may go on meanwhile), or
    the live tensors themselves for a save that blocks (`snapshot(copy=False)`)."""

    config: PretrainedConfig
    tensors: dict[str, torch.Tensor]  # CPU copies or live tensors, shared (tied) tensors once
    parameter_names: tuple[str, ...]  # the model's parameters, in module order, for the digest
    run_id: str
    step: int
    epoch: int
    tokenizer: SavesFiles | None = None

    @property
    def total_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def snapshot(
    model: torch.nn.Module,
    *,
    run_id: str,
    step: int,
    epoch: int,
    tokenizer: SavesFiles | None = None,
    copy: bool = True,
) -> Snapshot:
    """Copy the model's weights to CPU memory (the only part that must pause training).

    With `copy=False` the snapshot holds the live tensors (no memory): the model must not change
    until the snapshot is written."""
    if step < 0 or epoch < 0:
        raise ValueError(f"step and epoch must be >= 0, got {step}, {epoch}")
    tensors: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    with torch.no_grad():
        for name, t in model.state_dict(keep_vars=False).items():
            key = (t.untyped_storage().data_ptr(), t.storage_offset())
            if key in seen:  # tied weights (embeddings = lm head) are stored once, like HF does
                continue
            seen.add(key)
            t = t.detach()
            tensors[name] = t.to("cpu", copy=True).contiguous() if copy else t
    names = tuple(name for name, _ in model.named_parameters())
    missing = [n for n in names if n not in tensors]
    if missing:
        raise CheckpointError(f"parameters not in the state dict: {missing[:3]}")
    return Snapshot(checkpoint_config(model), tensors, names, run_id, step, epoch, tokenizer)


def checkpoint_config(model: torch.nn.Module) -> PretrainedConfig:
    """The config.json of a checkpoint of `model`: its own config, its class and its weights' dtype."""
    config = model.config.__class__.from_dict(model.config.to_dict())
    config.architectures = [type(model).__name__]  # what HF tools other than Auto* classes read
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype is not None:  # from_pretrained(dtype="auto") then builds the model in the run's dtype
        config.dtype = dtype
    return config


def checkpoint_name(run_id: str, step: int) -> str:
    """`<run id>-step<step>`, the run id reduced to safe characters (it comes from the chain)."""
    safe = _UNSAFE.sub("_", run_id)[:64].lstrip(".") or "run"
    return f"{safe}-step{step}"


def write_checkpoint(
    snap: Snapshot,
    root: str | Path,
    *,
    keep_last: int = 3,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: Progress | None = None,
) -> CheckpointInfo:
    """Write `snap` as `root/<run>-step<step>` atomically; keep the newest `keep_last`."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")

    def write(temp: Path) -> str:
        _write_files(snap, temp, max_shard_bytes, progress)
        return tensors_digest((n, snap.tensors[n]) for n in snap.parameter_names)

    return write_atomically(root, snap.run_id, snap.step, snap.epoch, write, keep_last=keep_last)


def write_atomically(root: str | Path, run_id: str, step: int, epoch: int, write: Callable[[Path], str], *,
                     keep_last: int = 3) -> CheckpointInfo:  # fmt: skip
    """`root/<run>-step<step>` as `write` fills a fresh hidden directory (and returns the weights' digest):
    the cohort file added, everything fsync'd, renamed into place, the newest `keep_last` kept."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(run_id, step)
    temp = root / f"{TEMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}"
    temp.mkdir()
    try:
        digest = write(temp)
        meta = CheckpointMeta(run_id, step, epoch, digest)
        _write_bytes(temp / COHORT_FILE, meta.encode())
        for written in temp.iterdir():
            _fsync(written)
        _fsync(temp)
        identity = manifest_hash(temp)
        _replace_dir(temp, final)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    prune(root, keep_last, keep=final)
    return CheckpointInfo(final, identity, step)


def save_checkpoint(
    model: torch.nn.Module,
    root: str | Path,
    *,
    run_id: str,
    step: int,
    epoch: int,
    tokenizer: SavesFiles | None = None,
    keep_last: int = 3,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: Progress | None = None,
) -> CheckpointInfo:
    """Write the model's live weights, no copy of them (blocks; see CheckpointWriter for the
    background one, which copies them once)."""
    snap = snapshot(model, run_id=run_id, step=step, epoch=epoch, tokenizer=tokenizer, copy=False)
    return write_checkpoint(
        snap, root, keep_last=keep_last, max_shard_bytes=max_shard_bytes, progress=progress
    )


def list_checkpoints(root: str | Path) -> list[tuple[CheckpointMeta, Path]]:
    """Complete checkpoints under `root`, oldest step first (temp dirs and strangers skipped)."""
    found = []
    root = Path(root)
    if not root.is_dir():
        return []
    for child in root.iterdir():
        if child.name.startswith(".") or not child.is_dir() or child.is_symlink():
            continue
        try:
            found.append((CheckpointMeta.read(child), child))
        except CheckpointError:
            continue
    return sorted(found, key=lambda item: (item[0].step, item[1].name))


def prune(root: Path, keep_last: int, keep: Path | None = None) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints and any leftover temp dirs."""
    removed = []
    for child in root.iterdir():
        if child.name.startswith(TEMP_PREFIX) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    checkpoints = [path for _, path in list_checkpoints(root)]
    for path in checkpoints[: max(0, len(checkpoints) - keep_last)]:
        if path != keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def weight_files(
    tensors: Mapping[str, torch.Tensor], max_shard_bytes: int
) -> dict[str, dict[str, torch.Tensor]]:
    """The safetensors files of a checkpoint holding `tensors` (in their order; meta tensors will do): the
    file name -> its tensors, one `model.safetensors` or Hugging Face shards of at most `max_shard_bytes`."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        if shards[-1] and size + n > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += n
    if len(shards) == 1:
        return {SINGLE_SHARD: shards[0]}
    return {
        f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors": shard
        for k, shard in enumerate(shards)
    }


def write_index(directory: Path, files: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
    """The shards' index (`model.safetensors.index.json`) when the weights span several files."""
    if len(files) > 1:
        total = sum(
            t.numel() * t.element_size() for shard in files.values() for t in shard.values()
        )
        weight_map = {t: name for name, shard in files.items() for t in shard}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        _write_bytes(directory / SHARD_INDEX, json.dumps(index, indent=2, sort_keys=True).encode())


def _write_files(
    snap: Snapshot, directory: Path, max_shard_bytes: int, progress: Progress | None
) -> None:
    files = weight_files(snap.tensors, max_shard_bytes)
    total, done = snap.total_bytes, 0

    def wrote(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    for name, shard in files.items():
        write_file(directory / name, shard, metadata=WEIGHTS_METADATA, progress=wrote)
    write_index(directory, files)
    snap.config.save_pretrained(directory)  # config.json
    if snap.tokenizer is not None:
        snap.tokenizer.save(directory)


def _replace_dir(temp: Path, final: Path) -> None:
    """Rename `temp` to `final`; an existing `final` (same step saved again) is swapped out."""
    old = None
    if final.exists():
        old = final.with_name(f"{TEMP_PREFIX}old-{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
    os.rename(temp, final)
    _fsync(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: Path) -> None:
    """fsync a file or a directory (a rename is durable once its directory is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
