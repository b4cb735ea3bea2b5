"""Deterministic aggregation: the update direction every replica derives from the accepted results.

Per parameter: scatter-mean of all peers' kept coefficients (a coefficient picked by j peers
gets the mean of those j values, unpicked ones stay 0), inverse DCT, sign. The peers are
summed one after the other in commitment order and no peer repeats a position inside a tile,
so every replica computes the same bits whatever the order in which results arrived.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise

import torch

from .dct import decode
from .layout import Layout
from .result import ReceivedResult


def canonical_order(received: Sequence[ReceivedResult]) -> list[ReceivedResult]:
    """Sort by commitment; reject repeats and mixed steps (both are caller bugs or attacks)."""
    ordered = sorted(received, key=lambda r: r.commitment)
    for a, b in pairwise(ordered):
        if a.commitment == b.commitment:
            raise ValueError(f"result {a.commitment.hex()[:16]}… was given twice")
    steps = {r.result.step for r in ordered}
    if len(steps) > 1:
        raise ValueError(f"results of different steps cannot be aggregated: {sorted(steps)}")
    return ordered


def mean_coefficients(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> Iterator[torch.Tensor]:
    """Per bucket, the dense (num_tiles, totalk) scatter-mean of all results' coefficients."""
    ordered = canonical_order(received)
    for i, b in enumerate(layout.buckets):
        total = torch.zeros(b.num_tiles, b.totalk, dtype=torch.float32, device=device)
        count = torch.zeros_like(total)
        ones = torch.ones(b.num_tiles, b.topk, dtype=torch.float32, device=device)
        for r in ordered:
            tiles = r.result.tiles[i]
            indices = tiles.indices.to(device)
            total.scatter_add_(1, indices, tiles.values.to(device=device, dtype=torch.float32))
            count.scatter_add_(1, indices, ones)
        yield total.div_(count.clamp_min_(1.0))


def aggregate_signs(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> list[torch.Tensor]:
    """Per bucket, sign(IDCT(scatter-mean)) stacked like the bucket's parameters: the update direction."""
    return [
        decode(mean, b.tile, b.stacked_shape, layout.transform).sign_()
        for b, mean in zip(layout.buckets, mean_coefficients(layout, received, device), strict=True)
    ]
