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
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def parameter_digest(module: torch.nn.Module) -> str:
    """The digest of every parameter of `module`, in module order (tied weights once)."""
    return tensors_digest(module.named_parameters())
