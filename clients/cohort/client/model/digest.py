"""A fingerprint of a model's weights, to check that replicas are bit-identical."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch


def tensors_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 (hex) over every tensor's name, dtype, shape and raw bytes, in the given order."""
    h = hashlib.sha256()
    for name, p in named:
        t = p.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(
            memoryview(t.reshape(-1).view(torch.uint8).numpy())
        )  # hashed where it lies: no copy
    return h.hexdigest()


def parameter_digest(module: torch.nn.Module) -> str:
    """The digest of every parameter of `module`, in module order (tied weights once)."""
    return tensors_digest(module.named_parameters())


def bit_sum(t: torch.Tensor) -> int:
    """The exact integer sum of a tensor's raw bit patterns (order-free: a sharded replica adds its
    shards' sums and gets the whole tensor's)."""
    flat = t.detach().contiguous().reshape(-1)
    width = flat.element_size()
    ints = flat.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[width])
    return int(ints.sum(dtype=torch.int64)) if width < 8 else int(ints.sum())


def checksum_of(entries: Iterable[tuple[str, torch.dtype, tuple[int, ...], int]]) -> int:
    """`weights_checksum` from (name, dtype, shape, bit_sum) per parameter, in model order."""
    h = hashlib.sha256()
    for name, dtype, shape, total in entries:
        h.update(f"{name}|{dtype}|{tuple(shape)}|{total}|".encode())
    return int.from_bytes(h.digest()[:8], "little")


def weights_checksum(module: torch.nn.Module) -> int:
    """A cheap u64 fingerprint of every parameter, for a per-round replica check: per tensor the exact
    integer sum of its raw bit patterns (one vectorised pass, on the tensor's own device; integer sums are
    order-free, so every replica gets the same number for the same bits), hashed with the tensor's name,
    dtype and shape. Any change of any weight's bits changes it; it is not meant to resist an adversary
    (it only compares our own replica with the majority's)."""
    with torch.no_grad():
        return checksum_of(
            (name, p.dtype, tuple(p.shape), bit_sum(p)) for name, p in module.named_parameters()
        )
