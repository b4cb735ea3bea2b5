"""A checkpoint written and read by rows: each process of a member that spans several (runtime/sharded.py)
writes its dim-0 rows of every tensor into the checkpoint's files where they belong, and reads them back from
there, so no process ever holds a whole tensor, let alone the model.

The files are exactly the ones a one-process replica writes of the same weights (`save.weight_files`, the
same headers and offsets: members vote one checkpoint hash whoever wrote it). The leader lays them out first
(`lay_out`: headers written, every file at its final size), every process then writes its rows (`write_rows`,
positioned writes: a tensor's dim-0 rows are a contiguous run of its bytes), and the leader finishes (config,
index, the cohort file, the rename: `save.write_atomically`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from .layout import CheckpointError
from .load import tensor_files
from .save import WEIGHTS_METADATA, weight_files, write_index
from .tensorfile import IO_BLOCK, TensorEntry, encode_header, layout_order


@dataclass(frozen=True)
class Placement:
    """Where a tensor's bytes lie in a checkpoint: its file (in the checkpoint's directory) and offset."""

    file: str
    offset: int
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def row_bytes(self) -> int:
        """Bytes of one dim-0 row."""
        return math.prod(self.shape[1:]) * self.dtype.itemsize


def placements(tensors: Mapping[str, torch.Tensor], max_shard_bytes: int) -> dict[str, Placement]:
    """Where each of `tensors` (in checkpoint order; meta tensors will do) lies in the files a checkpoint of
    them is made of."""
    out: dict[str, Placement] = {}
    for file, shard in weight_files(tensors, max_shard_bytes).items():
        offset = len(encode_header(shard, WEIGHTS_METADATA))
        for name in layout_order(shard):
            t = shard[name]
            out[name] = Placement(file, offset, tuple(t.shape), t.dtype)
            offset += t.numel() * t.element_size()
    return out


def lay_out(directory: Path, tensors: Mapping[str, torch.Tensor], max_shard_bytes: int) -> None:
    """Create the checkpoint's weight files in `directory`, each with its header and at its final size (the
    data still zeros), and the shards' index."""
    files = weight_files(tensors, max_shard_bytes)
    for file, shard in files.items():
        header = encode_header(shard, WEIGHTS_METADATA)
        with open(directory / file, "wb") as f:
            f.write(header)
            f.truncate(len(header) + sum(t.numel() * t.element_size() for t in shard.values()))
    write_index(directory, files)


def _cpu_bytes(rows: torch.Tensor) -> memoryview:
    t = rows.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    return memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy())


def write_rows(directory: Path, writes: Iterable[tuple[Placement, int, torch.Tensor]]) -> None:
    """Write each (placement, first row, rows) into its file, then make it durable."""
    handles: dict[str, int] = {}
    try:
        for place, first, rows in writes:
            if (
                tuple(rows.shape[1:]) != place.shape[1:]
                or first + rows.shape[0] > place.shape[0]
                or rows.dtype != place.dtype
            ):
                raise CheckpointError(
                    f"rows {first}+{tuple(rows.shape)} {rows.dtype} do not fit {place}"
                )
            fd = handles.get(place.file)
            if fd is None:
                fd = handles[place.file] = os.open(directory / place.file, os.O_WRONLY)
            data, at, done = _cpu_bytes(rows), place.offset + first * place.row_bytes, 0
            while done < len(data):
                done += os.pwrite(fd, data[done : done + IO_BLOCK], at + done)
        for fd in handles.values():
            os.fsync(fd)
    finally:
        for fd in handles.values():
            os.close(fd)


def find_entries(path: Path, names: Iterable[str]) -> dict[str, tuple[Path, TensorEntry]]:
    """The file and entry of each tensor named `names` in a verified checkpoint (CheckpointError for one it
    lacks); only headers are read."""
    found: dict[str, tuple[Path, TensorEntry]] = {}
    for file, entries in tensor_files(path).items():
        found.update((name, (file, entry)) for name, entry in entries.items())
    wanted = list(names)
    missing = [n for n in wanted if n not in found]
    if missing:
        raise CheckpointError(f"{path}: no weights for {missing[:3]} (other model?)")
    return {n: found[n] for n in wanted}


@torch.no_grad()
def read_rows(reads: Iterable[tuple[Path, TensorEntry, int, torch.Tensor]]) -> None:
    """Fill each (file, entry, first row, rows): rows [first, first + len(rows)) of the entry's tensor, read
    from its file straight into `rows` (a contiguous CPU tensor of the entry's dtype)."""
    for file, entry, first, rows in reads:
        if (
            tuple(rows.shape[1:]) != entry.shape[1:]
            or first + rows.shape[0] > entry.shape[0]
            or rows.dtype != entry.dtype
        ):
            raise CheckpointError(f"{entry.name}: rows {first}+{tuple(rows.shape)} {rows.dtype} do not fit "
                                  f"{entry.shape} {entry.dtype}")  # fmt: skip
        if rows.device.type != "cpu" or not rows.is_contiguous():
            raise CheckpointError(f"{entry.name}: rows are read into contiguous CPU tensors")
        row_bytes = math.prod(entry.shape[1:]) * entry.dtype.itemsize
        into = memoryview(rows.reshape(-1).view(torch.uint8).numpy())
        with open(file, "rb", buffering=0) as f:
            done, at = 0, entry.offset + first * row_bytes
            while done < len(into):
                n = os.preadv(f.fileno(), [into[done : done + IO_BLOCK]], at + done)
                if n == 0:
                    raise CheckpointError(f"{file.name} ends inside {entry.name}")
                done += n
