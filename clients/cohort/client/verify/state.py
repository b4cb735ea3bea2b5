"""The optimizer state a DisTrO step depends on, as deterministic bytes with a sha256 commitment.

What step s + 1 of a trainer reads besides the shared weights, its batch and the run's config
and LR schedule (optimizer.py, `lookahead` and `generate`): the fp32 momentum of every bucket
and the previous transmission as it is removed from the momentum (error feedback; None before
the first step or after a cold start, which also switches the lookahead off). Nothing else is
carried between steps: the saved weights exist only between `lookahead` and `generate`.

Layout (little-endian), version 1:

    magic      4s   b"CDTS"
    version    u16  1
    has_sent   u8   0 or 1
    reserved   u8   0
    step       u64  the step after which the state was taken (2**64 - 1: before any step)
    layout     32s  sha256 of the tiling plan (the same digest result payloads carry)
    momentum   per bucket: numel fp32 values, the bucket's parameters stacked in model order
    sent       if has_sent, per bucket: num_tiles * k u32 indices, then num_tiles * k fp32 values

Every size follows from the plan, so `decode_state` is strict, and equal states give equal bytes.

The commitment: a state is committed as a directory of two files, `state.bin` (the bytes above) and
`signs.bin` (the sign of every momentum value, 2 bits each: what the lookahead reads of the whole state),
cut into parts of `part_size(layout)` bytes (1/256 of the state or less: 16 KiB to 1 MiB) and listed in a
checkpoint-style manifest (p2p/manifest.py); the commitment a
result carries is the manifest's sha256. So a check fetches the manifest, the sign plane and only the parts
that hold the tile bands its seed samples (sample.py) — a small fraction of the state, from anyone who holds
those parts — and every part is checked against its hash on arrival.

    signs.bin  per bucket: ceil(numel / 4) bytes, value j's code in bits 2(j % 4)..+1 of byte j // 4:
               0 = zero, 1 = positive, 2 = negative (3 is refused)

A trainer writes its state straight to disk (`write_state`: bucket by bucket, parts hashed as they are
written, never whole in memory), and a replica stashes and restores its own the same way
(`read_state_into`); decoding supplied bytes shares their buffer instead of copying it.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import warnings
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..distro import DistroOptimizer, Layout, SparseTiles
from ..p2p.manifest import FileEntry, Manifest

STATE_FILE = "state.bin"
SIGNS_FILE = "signs.bin"
# bytes a committed part holds, the unit a check fetches and proves: `part_size` picks it per layout
PART_SIZE = 1 << 20  # the most: from a 256 MiB state up (~64M parameters)
MIN_PART_SIZE = 16 << 10  # the least: a small model's state is cut finer, down to this
PARTS_PER_STATE = 256  # what the part size aims at between the two
MAGIC = b"CDTS"
VERSION = 1
HEADER = struct.Struct("<4sHBBQ32s")
BEFORE_ANY_STEP = (1 << 64) - 1


class StateError(ValueError):
    """Bytes that are not an optimizer state of this run's layout."""


class StateMismatch(StateError):
    """A state whose sha256 is not the commitment the trainer published for it."""


@dataclass(frozen=True)
class OptimizerState:
    """A DistroOptimizer's between-steps state (copies, on the CPU)."""

    step: int  # BEFORE_ANY_STEP for a fresh optimizer
    layout: bytes
    momentum: tuple[torch.Tensor, ...]
    sent: tuple[SparseTiles, ...] | None


@dataclass(frozen=True)
class CommittedState:
    """A state a trainer committed to, on disk in `root` (`state.bin`, `signs.bin`): served to verifiers part
    by part, never held whole in memory."""

    root: Path
    manifest: Manifest

    @property
    def commitment(self) -> bytes:
        """The manifest's sha256: the hash its result carries."""
        return self.manifest.hash()

    def read_parts(self, wanted: Collection[bytes] | None = None) -> dict[bytes, bytes]:
        """Its parts by hash (those in `wanted`, or every one): what a verifier fetches of it."""
        parts = {}
        for ref in self.manifest.chunk_refs():
            if (wanted is None or ref.hash in wanted) and ref.hash not in parts:
                with open(self.root / self.manifest.files[ref.file_index].name, "rb") as f:
                    f.seek(ref.offset)
                    parts[ref.hash] = f.read(ref.size)
        return parts


def capture(optimizer: DistroOptimizer, step: int, copy: bool = True) -> OptimizerState:
    """The state of `optimizer` after `step` (call between `generate` and the next `lookahead`). With
    `copy=False` the state shares the optimizer's own tensors: valid until the optimizer next changes."""
    state = optimizer.state_dict()
    sent = state["sent"]
    if not copy:
        return OptimizerState(
            step=step,
            layout=state["layout"],
            momentum=tuple(state["momentum"]),
            sent=None if sent is None else tuple(SparseTiles(i, v) for i, v in sent),
        )
    return OptimizerState(
        step=step,
        layout=state["layout"],
        momentum=tuple(m.detach().cpu().clone() for m in state["momentum"]),
        sent=None
        if sent is None
        else tuple(SparseTiles(i.cpu().clone(), v.cpu().clone()) for i, v in sent),
    )


def restore(optimizer: DistroOptimizer, state: OptimizerState) -> None:
    """Put `state` into `optimizer` (same layout); its numerics are the optimizer's own."""
    sent = None if state.sent is None else [(t.indices, t.values) for t in state.sent]
    optimizer.load_state_dict(
        {"layout": state.layout, "momentum": list(state.momentum), "sent": sent}
    )


# momentum values converted at once while streaming a state (bounded temporaries)
STREAM_VALUES = 1 << 22


def _le(array: np.ndarray, dtype: str) -> memoryview:
    """A little-endian view of `array` in `dtype` (a copy only where the host or dtype differ)."""
    if array.dtype != np.dtype(dtype):
        array = array.astype(dtype)
    return memoryview(np.ascontiguousarray(array)).cast("B")


def state_parts(state: OptimizerState, layout: Layout) -> Iterator[memoryview | bytes]:
    """The bytes of `state` (see the module doc) in order, in pieces of bounded size."""
    if state.layout != layout.digest:
        raise StateError("state was taken for a different parameter layout")
    for b, m in zip(layout.buckets, state.momentum, strict=True):
        if tuple(m.shape) != b.stacked_shape:
            raise StateError(f"momentum of shape {tuple(m.shape)}, expected {b.stacked_shape}")
    yield _header(layout, state.step, state.sent)
    for _, values, _ in _bucket_values(layout, (m.detach().reshape(-1) for m in state.momentum)):
        yield _le(values, "<f4")
    yield from _sent_parts(layout, state.sent)


def _header(layout: Layout, step: int, sent: Sequence[SparseTiles] | None) -> bytes:
    return HEADER.pack(MAGIC, VERSION, sent is not None, 0, step, layout.digest)


def _bucket_values(
    layout: Layout, momentum: Iterable[torch.Tensor]
) -> Iterator[tuple[int, np.ndarray, bool]]:
    """The momentum given as pieces of any length (flat, in layout order: each bucket's values one after the
    other, a piece may span buckets) as fp32 arrays of at most `STREAM_VALUES` values that never span two
    buckets: (bucket index, values, whether they end the bucket). StateError unless the pieces hold exactly
    the layout's values."""
    sizes = [b.numel for b in layout.buckets]
    bucket, left = 0, sizes[0]
    for piece in momentum:
        flat = piece.detach().reshape(-1)
        lo = 0
        while lo < flat.numel():
            if bucket == len(sizes):
                raise StateError(f"momentum holds more than the layout's {layout.numel} values")
            hi = min(flat.numel(), lo + left, lo + STREAM_VALUES)
            left -= hi - lo
            yield bucket, flat[lo:hi].cpu().float().numpy(), left == 0
            lo = hi
            if left == 0:
                bucket += 1
                left = sizes[bucket] if bucket < len(sizes) else 0
    if bucket != len(sizes):
        raise StateError(f"momentum ends inside bucket {bucket} of {len(sizes)}")


def _sent_parts(layout: Layout, sent: Sequence[SparseTiles] | None) -> Iterator[memoryview]:
    """The `sent` section of a state: per bucket its indices (u32), then its values (fp32)."""
    if sent is None:
        return
    for b, t in zip(layout.buckets, sent, strict=True):
        if tuple(t.indices.shape) != (b.num_tiles, b.topk) or t.values.shape != t.indices.shape:
            raise StateError("sent tiles do not fit the layout")
        yield _le(t.indices.cpu().numpy(), "<u4")
        yield _le(t.values.cpu().float().numpy(), "<f4")


def encode_state(state: OptimizerState, layout: Layout) -> bytes:
    """The deterministic bytes of `state` (see the module doc)."""
    return b"".join(bytes(part) for part in state_parts(state, layout))


class _PartHashes:
    """sha256 of each `part`-byte piece of a stream, as it is written."""

    def __init__(self, part: int) -> None:
        self.part = part
        self.done: list[bytes] = []
        self._open, self._filled, self.size = hashlib.sha256(), 0, 0

    def update(self, data: memoryview | bytes) -> None:
        view = memoryview(data).cast("B")
        self.size += len(view)
        while len(view):
            take = min(len(view), self.part - self._filled)
            self._open.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.part:
                self.done.append(self._open.digest())
                self._open, self._filled = hashlib.sha256(), 0

    def finish(self) -> tuple[bytes, ...]:
        if self._filled:
            self.done.append(self._open.digest())
            self._open, self._filled = hashlib.sha256(), 0
        return tuple(self.done)


def sign_codes(values: np.ndarray) -> np.ndarray:
    """Packed 2-bit sign codes of `values` (a multiple of 4 of them, or padded with zeros)."""
    codes = (values > 0).astype(np.uint8) | ((values < 0).astype(np.uint8) << 1)
    if codes.size % 4:
        codes = np.concatenate([codes, np.zeros(4 - codes.size % 4, np.uint8)])
    quads = codes.reshape(-1, 4)
    return quads[:, 0] | (quads[:, 1] << 2) | (quads[:, 2] << 4) | (quads[:, 3] << 6)


def signs_of(packed: bytes | memoryview, count: int) -> torch.Tensor:
    """The signs (-1, 0, 1 as float32) of `count` values from their packed codes; StateError on code 3."""
    raw = np.frombuffer(packed, dtype=np.uint8)
    if raw.size * 4 < count:
        raise StateError("sign plane is truncated")
    codes = np.stack([(raw >> shift) & 3 for shift in (0, 2, 4, 6)], axis=1).reshape(-1)[:count]
    if (codes == 3).any():
        raise StateError("sign plane holds an invalid code")
    return torch.from_numpy((codes & 1).astype(np.float32) - (codes >> 1).astype(np.float32))


def signs_size(layout: Layout) -> int:
    return sum(-(-b.numel // 4) for b in layout.buckets)


class _SignCodes:
    """The sign plane of a bucket's values given in pieces of any length: packed as if in one piece."""

    def __init__(self) -> None:
        self._carry = np.zeros(0, np.float32)  # fewer than 4 values not packed yet

    def pack(self, values: np.ndarray, ends_bucket: bool) -> np.ndarray:
        if self._carry.size:
            values = np.concatenate([self._carry, values])
        whole = values.size if ends_bucket else values.size - values.size % 4
        self._carry = values[whole:].copy()
        return sign_codes(values[:whole])


class _HashedFile:
    """A file written in order, its `part`-byte parts hashed as they are written."""

    def __init__(self, path: Path, part: int) -> None:
        self.name, self._file, self._hashes = path.name, open(path, "wb"), _PartHashes(part)

    def write(self, data: memoryview | bytes) -> None:
        self._hashes.update(data)
        self._file.write(data)

    def close(self) -> FileEntry:
        self._file.close()
        return FileEntry(self.name, self._hashes.size, self._hashes.finish())


def write_committed(root: Path, layout: Layout, step: int, momentum: Iterable[torch.Tensor],
                    sent: Sequence[SparseTiles] | None, *, signs: bool = True) -> CommittedState:  # fmt: skip
    """Write a state of `layout` after `step` into the directory `root`: `state.bin` (see the module doc) and,
    unless `signs` is false (a stash nobody checks), `signs.bin`, in one pass over the momentum, hashing their
    parts as they are written. `momentum`: the fp32 momentum in pieces, flat, in layout order (each bucket's
    parameters stacked in model order; pieces of any length, read once, one at a time: a whole state never
    needs to be in memory, nor in one process); `sent`: the last transmission per bucket, or None."""
    root.mkdir(parents=True, exist_ok=True)
    chunk = part_size(layout)
    state = _HashedFile(root / STATE_FILE, chunk)
    plane = _HashedFile(root / SIGNS_FILE, chunk) if signs else None
    try:
        state.write(_header(layout, step, sent))
        codes = _SignCodes()
        for _, values, ends_bucket in _bucket_values(layout, momentum):
            state.write(_le(values, "<f4"))
            if plane is not None:
                plane.write(memoryview(codes.pack(values, ends_bucket)))
        for part in _sent_parts(layout, sent):
            state.write(part)
    finally:
        files = [state.close()] if plane is None else [plane.close(), state.close()]
    return CommittedState(root, Manifest(chunk, tuple(files)))


def write_state(
    optimizer: DistroOptimizer, step: int, root: Path, *, signs: bool = True
) -> CommittedState:
    """Write the optimizer's state after `step` into the directory `root` (`state.bin`, and `signs.bin`
    unless `signs` is false: a stash nobody checks), hashing its parts as they are written (no copy of the
    state in memory: the momentum is read where it lies)."""
    state = capture(optimizer, step, copy=False)
    return write_committed(root, optimizer.layout, step, (m.detach().reshape(-1) for m in state.momentum),
                           state.sent, signs=signs)  # fmt: skip


def read_state_into(optimizer: DistroOptimizer, path: Path) -> None:
    """Restore a state `write_state` wrote (its directory or its `state.bin`), reading the momentum straight into the optimizer's buffers."""
    layout = optimizer.layout
    path = path / STATE_FILE if path.is_dir() else path
    with open(path, "rb") as f:
        header = f.read(HEADER.size)
        magic, version, has_sent, _, _, digest = HEADER.unpack(header)
        if magic != MAGIC or version != VERSION or digest != layout.digest:
            raise StateError(f"{path} is not a state of this optimizer's layout")
        for m in optimizer.momentum:
            flat = m.detach().view(-1)
            for lo in range(0, flat.numel(), STREAM_VALUES):
                chunk = flat[lo : lo + STREAM_VALUES]
                if sys.byteorder == "little" and chunk.device.type == "cpu":
                    if f.readinto(memoryview(chunk.numpy()).cast("B")) != 4 * chunk.numel():
                        raise StateError(f"{path} is truncated")
                else:
                    raw = f.read(4 * chunk.numel())
                    chunk.copy_(
                        torch.from_numpy(np.frombuffer(raw, dtype="<f4").astype(np.float32))
                    )
        sent = None
        if has_sent:
            sent = []
            for b in layout.buckets:
                idx = np.frombuffer(f.read(4 * b.kept), dtype="<u4").astype(np.int64)
                val = np.frombuffer(f.read(4 * b.kept), dtype="<f4").astype(np.float32)
                device = optimizer.momentum[0].device
                sent.append(
                    (
                        torch.from_numpy(idx).view(b.num_tiles, b.topk).to(device),
                        torch.from_numpy(val).view(b.num_tiles, b.topk).to(device),
                    )
                )
    optimizer.load_state_dict(
        {"layout": layout.digest, "momentum": list(optimizer.momentum), "sent": sent}
    )


def state_size(layout: Layout, has_sent: bool) -> int:
    momentum = sum(4 * b.numel for b in layout.buckets)
    sent = sum(8 * b.kept for b in layout.buckets) if has_sent else 0
    return HEADER.size + momentum + sent


def part_size(layout: Layout) -> int:
    """The bytes a committed part of a state of `layout` holds: a power of two near 1/256 of the state, within
    16 KiB..1 MiB. A check reads ~32 whole parts, so with a fixed 1 MiB a small model's check read its whole
    state twice (7.8 MB a check at 0.9M parameters: 250 results' worth), and at 1/64 still 60% of it (2.3 MB,
    40 s over a 40 ms, 1% loss path); from ~64M parameters up it is 1 MiB."""
    size, total = MIN_PART_SIZE, state_size(layout, True)
    while size < PART_SIZE and size * PARTS_PER_STATE < total:
        size *= 2
    return size


def decode_state(data: bytes, layout: Layout) -> OptimizerState:
    """Parse state bytes strictly against `layout`; `StateError` says what is wrong. The momentum
    tensors share `data`'s buffer (read-only: they are never written)."""
    data = bytes(data)
    if len(data) < HEADER.size:
        raise StateError(f"truncated state: {len(data)} bytes")
    magic, version, has_sent, reserved, step, digest = HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or reserved or has_sent not in (0, 1):
        raise StateError("not an optimizer state of this version")
    if digest != layout.digest:
        raise StateError("state was taken for a different parameter layout")
    if len(data) != state_size(layout, bool(has_sent)):
        raise StateError(
            f"state is {len(data)} bytes, expected {state_size(layout, bool(has_sent))}"
        )
    offset = HEADER.size
    momentum = []
    for b in layout.buckets:
        raw = np.frombuffer(data, dtype="<f4", count=b.numel, offset=offset)
        if sys.byteorder != "little":
            raw = raw.astype(np.float32)
        with warnings.catch_warnings():  # read-only bytes: the tensor shares them and is only read
            warnings.simplefilter("ignore", UserWarning)
            momentum.append(torch.from_numpy(raw).view(b.stacked_shape))
        offset += 4 * b.numel
    sent = None
    if has_sent:
        tiles = []
        for b in layout.buckets:
            idx = np.frombuffer(data, dtype="<u4", count=b.kept, offset=offset)
            offset += 4 * b.kept
            val = np.frombuffer(data, dtype="<f4", count=b.kept, offset=offset)
            offset += 4 * b.kept
            if idx.size and int(idx.max()) >= b.totalk:
                raise StateError("sent index out of range for its tile")
            tiles.append(
                SparseTiles(
                    torch.from_numpy(idx.astype(np.int64)).view(b.num_tiles, b.topk),
                    torch.from_numpy(val.astype(np.float32)).view(b.num_tiles, b.topk),
                )
            )
        sent = tuple(tiles)
    if not all(bool(torch.isfinite(m).all()) for m in momentum):
        raise StateError("momentum values must be finite")
    return OptimizerState(step, digest, tuple(momentum), sent)


def state_bytes(optimizer: DistroOptimizer, step: int) -> bytes:
    """`encode_state(capture(optimizer, step))`: the bytes of `state.bin` for the optimizer's state."""
    return encode_state(capture(optimizer, step), optimizer.layout)
