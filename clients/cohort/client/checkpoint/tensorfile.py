"""safetensors files written and read a tensor at a time, never the whole file in memory.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a
JSON header `{"__metadata__": {...}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}`
padded with spaces to a multiple of 8, then the tensors' bytes. We lay a file out exactly as
`safetensors.torch.save_file` does (tensors sorted by dtype, widest first, then by name), so the
bytes, and with them a checkpoint's manifest hash, do not depend on which of the two wrote it.

Writing streams each tensor from its own memory (one CPU copy of a tensor at a time when it lives on
an accelerator); reading validates the header against the file's size before allocating anything,
then reads each tensor's bytes straight into its destination (a parameter's own storage when the
dtype matches and it is a contiguous CPU tensor, else a one-tensor buffer that is copied over).
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import torch

MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit
IO_BLOCK = 64 << 20  # one read/write call at most (Linux caps a single call near 2 GiB)

# safetensors' Dtype enum in declaration order: save_file sorts tensors by it, descending
_DTYPES: tuple[tuple[str, torch.dtype], ...] = (
    ("BOOL", torch.bool),
    ("U8", torch.uint8),
    ("I8", torch.int8),
    ("F8_E5M2", torch.float8_e5m2),
    ("F8_E4M3", torch.float8_e4m3fn),
    ("I16", torch.int16),
    ("U16", torch.uint16),
    ("F16", torch.float16),
    ("BF16", torch.bfloat16),
    ("I32", torch.int32),
    ("U32", torch.uint32),
    ("F32", torch.float32),
    ("C64", torch.complex64),
    ("F64", torch.float64),
    ("I64", torch.int64),
    ("U64", torch.uint64),
)
DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in _DTYPES}
DTYPES: dict[str, torch.dtype] = {name: dtype for name, dtype in _DTYPES}
_RANK = {name: k for k, (name, _) in enumerate(_DTYPES)}

if sys.byteorder != "little":  # safetensors is little-endian; we write memory as it is
    raise ImportError("checkpoint files are written from memory and need a little-endian machine")


class TensorFileError(ValueError):
    """A safetensors file that is malformed or does not match what its header says."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file: its dtype, shape and where its bytes are in the file."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # absolute, in the file
    nbytes: int


def layout_order(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """The order save_file lays tensors out in: dtype (widest first), then name."""
    return sorted(tensors, key=lambda n: (-_RANK[_dtype_name(tensors[n].dtype)], n))


def encode_header(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """The length prefix and the padded JSON header of a file holding `tensors`."""
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in layout_order(tensors):
        t = tensors[name]
        nbytes = t.numel() * t.element_size()
        header[name] = {
            "dtype": _dtype_name(t.dtype),
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(raw)) + raw


def write_file(
    path: str | Path,
    tensors: Mapping[str, torch.Tensor],
    *,
    metadata: Mapping[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write `tensors` as one safetensors file, each straight from its memory; returns the file size.

    `progress(n)` is called with the bytes of each tensor once they are written. The file is
    fsync'd before returning.
    """
    header = encode_header(tensors, metadata or {})
    size = len(header)
    with open(path, "wb", buffering=0) as f:  # unbuffered: memoryviews go to the kernel as they are
        _write_all(f, memoryview(header))
        for name in layout_order(tensors):
            t = tensors[name].detach()
            if t.device.type != "cpu":
                t = t.to("cpu")  # one tensor's copy, not the model's
            t = t.contiguous()
            if t.numel():
                _write_all(f, memoryview(t.reshape(-1).view(torch.uint8).numpy()))
            n = t.numel() * t.element_size()
            size += n
            if progress is not None:
                progress(n)
        os.fsync(f.fileno())
    return size


def read_header(path: str | Path) -> dict[str, TensorEntry]:
    """The tensors a safetensors file holds, checked against its size (nothing else is read)."""
    path = Path(path)
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        prefix = f.read(8)
        if len(prefix) != 8:
            raise TensorFileError(f"{path.name}: shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(MAX_HEADER_BYTES, file_size - 8):
            raise TensorFileError(f"{path.name}: header of {length} bytes does not fit the file")
        raw = f.read(length)
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise TensorFileError(f"{path.name}: header is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise TensorFileError(f"{path.name}: header is not a JSON object")
    start = 8 + length
    entries: dict[str, TensorEntry] = {}
    spans = []
    for name, item in doc.items():
        if name == "__metadata__":
            continue
        entry = _entry(path.name, name, item, start)
        if entry.offset + entry.nbytes > file_size:
            raise TensorFileError(f"{path.name}: {name} lies past the end of the file")
        entries[name] = entry
        spans.append((entry.offset, entry.offset + entry.nbytes))
    spans.sort()
    for (_, end), (begin, _) in pairwise(spans):
        if begin < end:
            raise TensorFileError(f"{path.name}: tensors overlap")
    return entries


def read_into(
    path: str | Path,
    targets: Iterable[tuple[TensorEntry, torch.Tensor]],
    *,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Read each entry's bytes into its target tensor (same shape; a different dtype is converted).

    A contiguous CPU target of the entry's dtype is filled in place from the file; any other gets
    a one-tensor CPU buffer first. Entries are read in file order.
    """
    with open(path, "rb", buffering=0) as f, torch.no_grad():
        for entry, target in sorted(targets, key=lambda pair: pair[0].offset):
            if tuple(target.shape) != entry.shape:
                raise TensorFileError(
                    f"{entry.name}: file shape {entry.shape} != destination {tuple(target.shape)}"
                )
            direct = (
                target.device.type == "cpu"
                and target.dtype == entry.dtype
                and target.is_contiguous()
            )
            buffer = target.detach() if direct else torch.empty(entry.shape, dtype=entry.dtype)
            if entry.nbytes:
                _read_exactly(
                    f, entry.offset, memoryview(buffer.reshape(-1).view(torch.uint8).numpy())
                )
            if not direct:
                target.copy_(buffer)
            if progress is not None:
                progress(entry.nbytes)


def read_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of one file as new CPU tensors (memory: the file's tensors; for small files)."""
    entries = read_header(path)
    tensors = {name: torch.empty(e.shape, dtype=e.dtype) for name, e in entries.items()}
    read_into(path, ((e, tensors[name]) for name, e in entries.items()))
    return tensors


def _entry(file: str, name: str, item: object, start: int) -> TensorEntry:
    if not isinstance(item, dict):
        raise TensorFileError(f"{file}: {name!r:.80} is not a tensor description")
    dtype = DTYPES.get(item.get("dtype"))  # type: ignore[arg-type]
    shape = item.get("shape")
    offsets = item.get("data_offsets")
    if (
        dtype is None
        or not isinstance(shape, list)
        or not all(_is_count(d) for d in shape)
        or not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_count(o) for o in offsets)
    ):
        raise TensorFileError(f"{file}: {name!r:.80} has no usable dtype, shape and data_offsets")
    begin, end = offsets
    nbytes = math.prod(shape) * dtype.itemsize
    if end - begin != nbytes:
        raise TensorFileError(
            f"{file}: {name!r:.80} spans {end - begin} bytes, its shape needs {nbytes}"
        )
    return TensorEntry(name, dtype, tuple(shape), start + begin, nbytes)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise TensorFileError(f"safetensors has no dtype for {dtype}") from None


def _write_all(f, data: memoryview) -> None:
    data = data.cast("B")
    while data:
        written = f.write(data[:IO_BLOCK])
        data = data[written:]


def _read_exactly(f, offset: int, into: memoryview) -> None:
    into = into.cast("B")
    done = 0
    while done < len(into):
        n = os.preadv(f.fileno(), [into[done : done + IO_BLOCK]], offset + done)
        if n == 0:
            raise TensorFileError(f"file ends before the tensor at offset {offset} does")
        done += n
