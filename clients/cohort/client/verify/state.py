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
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

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


def capture(optimizer: DistroOptimizer, step: int) -> OptimizerState:
    """The state of `optimizer` after `step` (call between `generate` and the next `lookahead`)."""
    state = optimizer.state_dict()
    sent = state["sent"]
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


def encode_state(state: OptimizerState, layout: Layout) -> bytes:
    """The deterministic bytes of `state` (see the module doc)."""
    if state.layout != layout.digest:
        raise StateError("state was taken for a different parameter layout")
    parts = [HEADER.pack(MAGIC, VERSION, state.sent is not None, 0, state.step, state.layout)]
    for b, m in zip(layout.buckets, state.momentum, strict=True):
        if tuple(m.shape) != b.stacked_shape:
            raise StateError(f"momentum of shape {tuple(m.shape)}, expected {b.stacked_shape}")
        parts.append(m.detach().cpu().float().contiguous().numpy().astype("<f4").tobytes())
    if state.sent is not None:
        for b, t in zip(layout.buckets, state.sent, strict=True):
            if tuple(t.indices.shape) != (b.num_tiles, b.topk) or t.values.shape != t.indices.shape:
                raise StateError("sent tiles do not fit the layout")
            parts.append(t.indices.cpu().numpy().astype("<u4").tobytes())
            parts.append(t.values.cpu().float().contiguous().numpy().astype("<f4").tobytes())
    return b"".join(parts)


def state_size(layout: Layout, has_sent: bool) -> int:
    momentum = sum(4 * b.numel for b in layout.buckets)
    sent = sum(8 * b.kept for b in layout.buckets) if has_sent else 0
    return HEADER.size + momentum + sent


def decode_state(data: bytes, layout: Layout) -> OptimizerState:
    """Parse state bytes strictly against `layout`; `StateError` says what is wrong."""
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
        momentum.append(torch.from_numpy(raw.astype(np.float32)).view(b.stacked_shape))
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
