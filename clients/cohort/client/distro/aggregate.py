"""Deterministic aggregation: the update direction every replica derives from the accepted results.

The rule, per parameter bucket, over the N accepted results of a step:

 1. bound each result: its kept values in every tile are divided by that tile's largest |value|
    (`bounded_values`), so they lie in [-1, 1]. 1-bit values are +-1 already and stay as they
    are; a tile whose values are all zero stays zero;
 2. average over all N results, not over the results that picked a coefficient: a coefficient
    is the sum of the bounded values of the results that picked it, divided by N. A lone pick
    counts 1/N, a unanimous pick counts 1, an unpicked coefficient is 0;
 3. inverse DCT, sign.

Why: with DeMo's scatter-mean (a picked coefficient gets the mean over its pickers) a value
picked by one result weighs as much as one every result agrees on, and with fp/bf16 values a
single result scaled by -1e30 decided 88% of a 4-client aggregate's signs. Under this rule one
result changes any aggregate coefficient by at most 1/N, whatever bytes it sent, while the
others together hold (N-1)/N of it (tests/distro/test_influence.py: one adversarial result of
4 changes 10-18% of the signs, an honest one 10%; under the scatter-mean 42-72%).

What changes for honest results: the inverse DCT works tile by tile and sign() ignores a
positive scale, so a single result gives the signs it gave before (but for coordinates within
rounding of zero), and the bound only makes every result weigh the same in every tile. With
1-bit values the bound changes nothing; the rule differs from the scatter-mean only where
results picked different coefficients, where a coefficient picked by j of N results is the
scatter-mean times j / N (yardsticks/reference.py pins both). Consensus picks now outweigh lone ones; on
the tiny-model parity benchmark that costs a little held-out loss: 1.080x AdamW instead of
1.050x at 200 steps, 1.083x instead of 1.065x (seed 0) and 1.060x instead of 1.053x (seed 1)
at 600 steps. The gap closes with training: 1.074x at 200 steps and 1.038x at the benchmark's 2,000
(the exact apply, DisTrO's rate retuned to 3e-3). The max is exact and order-free and the division is correctly rounded, so the
bounds are bit-identical on every replica.

The results are put in commitment order first. The direction is then computed in exact arithmetic
and rounded once (principle 12: replicas agree across hardware): each bounded value becomes an integer
number of 2**-q steps (q = `value_bits`, 12 unless the run is very large; 1-bit values are +-2**q), the
inverse DCT uses the integer basis of dct.exact_basis, and the division by N is dropped (sign() ignores a
positive scale). Every product and partial sum is then an integer below 2**53, so float64 arithmetic is
exact in any order: the signs are the same bits on any device, kernel, thread count, micro-batching or
sharding, and whether the inverse is done densely or term by term (`decode_sparse`, cheaper when the
tiles hold few terms). The two roundings (values and basis, ~2.4e-4 and ~3e-4 relative) move only
coordinates within that distance of zero, and identically on every replica.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise

import torch

from .compress import SparseTiles
from .dct import BASIS_BITS, decode, decode_sparse, sparse_pays
from .layout import BandSlice, Bucket, Layout
from .result import ReceivedResult

VALUE_BITS = 12  # steps of a bounded value: 2**-12 (a relative 2.4e-4 of a tile's largest value)
EXACT_BITS = 52  # every integer of magnitude below 2**53 is a float64; one bit of margin


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


def bounded_values(values: torch.Tensor) -> torch.Tensor:
    """One result's (num_tiles, k) kept values divided by each tile's largest |value|: in [-1, 1].

    The max is exact and a correctly rounded v / max with |v| <= max never exceeds 1, so the
    bound holds bit for bit on any hardware; +-1 (1-bit) rows come back unchanged, all-zero
    rows stay zero."""
    values = values.float()
    scale = values.abs().amax(dim=1, keepdim=True)
    return values / torch.where(scale > 0, scale, torch.ones_like(scale))


def mean_terms(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> Iterator[SparseTiles]:
    """Per bucket, all results' kept coefficients side by side in commitment order, (tiles, n * k),
    each bounded per tile (`bounded_values`) and divided by the number of results n: the terms
    of a position add up to the aggregate coefficient, so any linear reconstruction of them is
    the aggregate's."""
    ordered = canonical_order(received)
    n = len(ordered)
    for i in range(len(layout.buckets)):
        indices = torch.cat([r.result.tiles[i].indices for r in ordered], dim=1).to(device)
        values = torch.cat(
            [bounded_values(r.result.tiles[i].values.to(device)) for r in ordered], dim=1
        )
        if n > 1:
            values = values / n
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
    """Per bucket, the dense (num_tiles, totalk) aggregate coefficients: the mean over all n
    results of their bounded sparse tiles (zeros where a result picked nothing), in [-1, 1]."""
    for b, terms in zip(layout.buckets, mean_terms(layout, received, device), strict=True):
        yield _dense(terms, b.topk, b.totalk)


def value_bits(terms_per_tile: int, tile: Sequence[int]) -> int:
    """Bits q of the value steps such that a tile's exact inverse DCT stays below 2**53: its magnitude is
    at most terms * 2**q * 2**(BASIS_BITS * dims)."""
    q = min(
        VALUE_BITS, EXACT_BITS - BASIS_BITS * len(tile) - max(terms_per_tile - 1, 0).bit_length()
    )
    if q < 0:
        raise ValueError(f"{terms_per_tile} terms a tile are too many for an exact apply")
    return q


def exact_terms(
    bucket: Bucket,
    index: int,
    ordered: Sequence[ReceivedResult],
    rows: slice,
    device: torch.device | str,
) -> SparseTiles:
    """Tiles `rows` of bucket `index`: every result's kept coefficients side by side (commitment order),
    each value bounded per tile and made an integer number of 2**-q steps, in float64."""
    q = value_bits(len(ordered) * bucket.topk, bucket.tile)
    indices = torch.cat([r.result.tiles[index].indices[rows] for r in ordered], dim=1).to(device)
    values = torch.cat(
        [bounded_values(r.result.tiles[index].values[rows].to(device)) for r in ordered], dim=1
    )
    return SparseTiles(indices, torch.round(values.double() * float(1 << q)))


def exact_update(
    terms: SparseTiles, bucket: Bucket, shape: Sequence[int], transform: str
) -> torch.Tensor:
    """The exact, integer-valued inverse DCT of integer terms (float64), as a tensor of `shape`."""
    if sparse_pays(terms.indices.shape[1], bucket.tile):
        return decode_sparse(terms.indices, terms.values, bucket.tile, shape, transform, exact=True)
    dense = torch.zeros(
        terms.indices.shape[0], bucket.totalk, dtype=torch.float64, device=terms.values.device
    )
    dense.scatter_add_(1, terms.indices, terms.values)  # integer sums: exact in any order
    return decode(dense, bucket.tile, shape, transform, exact=True)


def band_directions(
    layout: Layout,
    received: Sequence[ReceivedResult],
    max_elements: int,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[BandSlice, torch.Tensor]]:
    """The update direction band slice by band slice (each at most `max_elements` values): the slice and
    sign(exact inverse DCT of the aggregate) over its (rows, row_width), float32 in {-1, 0, 1}. Temporaries
    stay within a few times one slice whatever the model's size."""
    ordered = canonical_order(received)
    for i, b in enumerate(layout.buckets):
        for band in b.bands(max_elements):
            terms = exact_terms(b, i, ordered, band.tiles, device)
            yield band, exact_update(terms, b, band.shape, layout.transform).sign_().float()


def aggregate_update(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> Iterator[torch.Tensor]:
    """Per bucket, the exact integer-valued aggregate update before sign (float64), stacked like the
    bucket's parameters: a positive multiple of IDCT(mean_coefficients) up to the two roundings."""
    ordered = canonical_order(received)
    for i, b in enumerate(layout.buckets):
        terms = exact_terms(b, i, ordered, slice(None), device)
        yield exact_update(terms, b, b.stacked_shape, layout.transform)


def aggregate_signs(
    layout: Layout, received: Sequence[ReceivedResult], device: torch.device | str = "cpu"
) -> list[torch.Tensor]:
    """Per bucket, the update direction stacked like the bucket's parameters (float32 signs)."""
    return [update.sign_().float() for update in aggregate_update(layout, received, device)]
