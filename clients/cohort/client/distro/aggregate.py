"""Deterministic aggregation: the update direction every replica derives from the accepted results.

Per parameter: scatter-mean of all peers' kept coefficients (a coefficient picked by j peers
gets the mean of those j values, unpicked ones stay 0), inverse DCT, sign. The results are
put in commitment order first and every later step has a fixed order of operations, so every
replica computes the same bits whatever the order in which results arrived. When the tiles
hold few terms the inverse DCT is done term by term (`decode_sparse`), which is cheaper.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise

import torch

from .compress import SparseTiles
from .dct import decode, decode_sparse, sparse_pays
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


def mean_terms(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> Iterator[SparseTiles]:
    """Per bucket, all results' kept coefficients side by side in commitment order, (tiles, n * k),
    each divided by how many results picked that position of that tile: the terms of a position
    add up to the scatter-mean, so any linear reconstruction of them is the mean's."""
    ordered = canonical_order(received)
    for i in range(len(layout.buckets)):
        indices = torch.cat([r.result.tiles[i].indices for r in ordered], dim=1).to(device)
        values = torch.cat([r.result.tiles[i].values for r in ordered], dim=1).to(
            device, torch.float32
        )
        if len(ordered) > 1:
            positions, order = indices.sort(dim=1, stable=True)
            picks = torch.searchsorted(positions, positions, right=True) - torch.searchsorted(
                positions, positions
            )
            values = values / torch.empty_like(picks).scatter_(1, order, picks)
        yield SparseTiles(indices, values)


def _dense(terms: SparseTiles, topk: int, totalk: int) -> torch.Tensor:
    """Add the terms into dense (tiles, totalk) coefficients, one result's block of k at a time
    (positions are unique inside a block, so the sums happen in a fixed order)."""
    dense = torch.zeros(
        terms.indices.shape[0], totalk, dtype=torch.float32, device=terms.values.device
    )
    for start in range(0, terms.indices.shape[1], topk):
        block = slice(start, start + topk)
        dense.scatter_add_(1, terms.indices[:, block], terms.values[:, block])
    return dense


def mean_coefficients(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> Iterator[torch.Tensor]:
    """Per bucket, the dense (num_tiles, totalk) scatter-mean of all results' coefficients."""
    for b, terms in zip(layout.buckets, mean_terms(layout, received, device), strict=True):
        yield _dense(terms, b.topk, b.totalk)


def aggregate_update(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> Iterator[torch.Tensor]:
    """Per bucket, IDCT of the scatter-mean, stacked like the bucket's parameters (before sign)."""
    for b, terms in zip(layout.buckets, mean_terms(layout, received, device), strict=True):
        if sparse_pays(terms.indices.shape[1], b.tile):
            yield decode_sparse(
                terms.indices, terms.values, b.tile, b.stacked_shape, layout.transform
            )
        else:
            yield decode(_dense(terms, b.topk, b.totalk), b.tile, b.stacked_shape, layout.transform)


def aggregate_signs(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> list[torch.Tensor]:
    """Per bucket, sign(IDCT(scatter-mean)) stacked like the bucket's parameters: the update direction."""
    return [update.sign_() for update in aggregate_update(layout, received, device)]
