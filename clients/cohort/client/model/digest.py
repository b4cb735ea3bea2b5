"""A fingerprint of a model's weights, to check that replicas are bit-identical."""

from __future__ import annotations

import hashlib

import torch


def parameter_digest(module: torch.nn.Module) -> str:
    """sha256 (hex) over every parameter's name, dtype, shape and raw bytes, in module order."""
    h = hashlib.sha256()
    for name, p in module.named_parameters():
        t = p.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
