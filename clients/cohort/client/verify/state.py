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

A trainer writes its state straight to a file (`write_state`: bucket by bucket, hashed as it goes, never
whole in memory), and a replica stashes and restores its own the same way (`read_state_into`); decoding
supplied bytes shares their buffer instead of copying it.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..distro import DistroOptimizer, Layout, SparseTiles

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
    """A state a trainer committed to, on disk: served to verifiers by range, never held whole in memory."""

    path: Path
    size: int
    commitment: bytes  # sha256 of the file's bytes (the hash its result carries)

    def read(self) -> bytes:
        return self.path.read_bytes()


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
    yield HEADER.pack(MAGIC, VERSION, state.sent is not None, 0, state.step, state.layout)
    for b, m in zip(layout.buckets, state.momentum, strict=True):
        if tuple(m.shape) != b.stacked_shape:
            raise StateError(f"momentum of shape {tuple(m.shape)}, expected {b.stacked_shape}")
        flat = m.detach().reshape(-1)
        for lo in range(0, flat.numel(), STREAM_VALUES):
            yield _le(flat[lo : lo + STREAM_VALUES].cpu().float().numpy(), "<f4")
    if state.sent is not None:
        for b, t in zip(layout.buckets, state.sent, strict=True):
            if tuple(t.indices.shape) != (b.num_tiles, b.topk) or t.values.shape != t.indices.shape:
                raise StateError("sent tiles do not fit the layout")
            yield _le(t.indices.cpu().numpy(), "<u4")
            yield _le(t.values.cpu().float().numpy(), "<f4")


def encode_state(state: OptimizerState, layout: Layout) -> bytes:
    """The deterministic bytes of `state` (see the module doc)."""
    return b"".join(bytes(part) for part in state_parts(state, layout))


def state_commitment_of(state: OptimizerState, layout: Layout) -> bytes:
    """`state_commitment(encode_state(state))`, hashed piece by piece (no copy of the state)."""
    digest = hashlib.sha256()
    for part in state_parts(state, layout):
        digest.update(part)
    return digest.digest()


def write_state(optimizer: DistroOptimizer, step: int, path: Path) -> CommittedState:
    """Write the optimizer's state after `step` to `path`, hashing it as it goes (no copy of the state
    in memory: the momentum is read where it lies)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "wb") as f:
        for part in state_parts(capture(optimizer, step, copy=False), optimizer.layout):
            digest.update(part)
            f.write(part)
            size += len(part)
    return CommittedState(path, size, digest.digest())


def read_state_into(optimizer: DistroOptimizer, path: Path) -> None:
    """Restore a state `write_state` wrote, reading the momentum straight into the optimizer's buffers."""
    layout = optimizer.layout
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
                    chunk.copy_(torch.from_numpy(np.frombuffer(raw, dtype="<f4").astype(np.float32)))
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


def state_commitment(data: bytes) -> bytes:
    """The sha256 a trainer publishes with its result of step s for its state after step s."""
    return hashlib.sha256(data).digest()


def load_committed(
    data: bytes, commitment: bytes, layout: Layout, step: int | None = None
) -> OptimizerState:
    """Decode state bytes a trainer supplied, refusing them unless they hash to its commitment
    (and, given `step`, were taken after that step)."""
    if state_commitment(data) != commitment:
        raise StateMismatch("the supplied state does not match the trainer's commitment")
    state = decode_state(data, layout)
    if step is not None and state.step != step:
        raise StateError(f"the supplied state was taken after step {state.step}, not {step}")
    return state


def state_bytes(optimizer: DistroOptimizer, step: int) -> bytes:
    """`encode_state(capture(optimizer, step))`: what a trainer hashes after each step."""
    return encode_state(capture(optimizer, step), optimizer.layout)


def load_state_bytes(
    optimizer: DistroOptimizer, data: bytes, commitment: bytes, step: int | None = None
) -> OptimizerState:
    """Restore committed state bytes into `optimizer` (refused unless they match the commitment)."""
    state = load_committed(data, commitment, optimizer.layout, step)
    restore(optimizer, state)
    return state
