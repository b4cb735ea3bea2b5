"""Orthonormal DCT-II per tile: tensors <-> rows of tile coefficients.

`encode` cuts the last dimension (1-D tile) or the last two dimensions (2-D tile) of a tensor
into tiles, transforms each, and returns a (num_tiles, totalk) matrix whose rows are the
flattened tile coefficients; leading dimensions (a bucket's stack of parameters) just add
tiles. `decode` is the exact inverse: the basis is orthonormal, so its inverse is its transpose.

`exact=True` decodes with the integer basis round(C * 2**BASIS_BITS) in float64: fed integer
coefficients, every product and partial sum is an integer below 2**53, so the result is exact in any
summation order, on any device, with any thread count or blocking (the apply of aggregate.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import torch


@lru_cache(maxsize=256)
def dct_basis(
    n: int, device: torch.device, dtype: torch.dtype, transform: str = "dct"
) -> torch.Tensor:
    """The n x n orthonormal DCT-II matrix C (coefficients = C @ signal), cached per size and device.

    transform="identity" gives the identity matrix: same tiling, no change of basis.
    """
    if n < 1:
        raise ValueError(f"basis size must be >= 1, got {n}")
    if transform == "identity":
        return torch.eye(n, dtype=dtype, device=device)
    if transform != "dct":
        raise ValueError(f"unknown transform {transform!r}")
    k = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(n, dtype=torch.float64).unsqueeze(0)
    basis = torch.cos(math.pi * (2 * j + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    basis[0] /= math.sqrt(2.0)
    return basis.to(device=device, dtype=dtype)


# bits of the integer basis: C's entries to 2**-14 (a relative 3e-4 at chunk 64); products with 2**12
# value steps stay exact in float64 for up to 2**25 / 2**12 kept terms a tile (aggregate.py budgets it)
BASIS_BITS = 14


@lru_cache(maxsize=256)
def exact_basis(n: int, device: torch.device, transform: str = "dct") -> torch.Tensor:
    """round(C * 2**BASIS_BITS) as float64: the same integers on every machine.

    Computed from Python's double `math.cos` and rounded; an entry within 1e-9 of a rounding boundary
    (where two C libraries might round differently) is refused rather than risked."""
    if n < 1:
        raise ValueError(f"basis size must be >= 1, got {n}")
    scale = float(1 << BASIS_BITS)
    if transform == "identity":
        return torch.eye(n, dtype=torch.float64, device=device) * scale
    if transform != "dct":
        raise ValueError(f"unknown transform {transform!r}")
    rows = []
    for k in range(n):
        norm = math.sqrt((1.0 if k == 0 else 2.0) / n)
        row = []
        for j in range(n):
            x = math.cos(math.pi * (2 * j + 1) * k / (2 * n)) * norm * scale
            if abs(abs(x - math.floor(x)) - 0.5) < 1e-9:
                raise ValueError(f"DCT basis of size {n} has an entry on a rounding boundary")
            row.append(float(round(x)))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64, device=device)


def _bases(
    tile: Sequence[int], device: torch.device, dtype: torch.dtype, transform: str, exact: bool
) -> list[torch.Tensor]:
    if exact:
        if dtype != torch.float64:
            raise ValueError(f"an exact decode needs float64 integer coefficients, got {dtype}")
        return [exact_basis(n, device, transform) for n in tile]
    return [dct_basis(n, device, dtype, transform) for n in tile]


def _check_tiling(shape: Sequence[int], tile: Sequence[int]) -> None:
    if len(tile) not in (1, 2) or len(shape) < len(tile):
        raise ValueError(f"cannot tile shape {tuple(shape)} with tile {tuple(tile)}")
    if any(d % n for d, n in zip(shape[-len(tile) :], tile, strict=True)):
        raise ValueError(f"tile {tuple(tile)} does not divide shape {tuple(shape)}")


def encode(x: torch.Tensor, tile: Sequence[int], transform: str = "dct") -> torch.Tensor:
    """Tile `x` over its last len(tile) dims and transform each tile -> (num_tiles, totalk)."""
    _check_tiling(x.shape, tile)
    bases = [dct_basis(n, x.device, x.dtype, transform) for n in tile]
    if len(tile) == 1:
        return x.reshape(-1, tile[0]) @ bases[0].T
    (n1, n2), (c1, c2) = tile, bases
    h, w = x.shape[-2:]
    # rows first as one large GEMM over contiguous n2-chunks, then columns per band of n1 rows
    rows = (x.reshape(-1, n2) @ c2.T).reshape(-1, n1, w)
    both = (c1 @ rows).reshape(-1, h // n1, n1, w // n2, n2)
    return both.permute(0, 1, 3, 2, 4).reshape(-1, n1 * n2)


def decode(
    coefficients: torch.Tensor,
    tile: Sequence[int],
    shape: Sequence[int],
    transform: str = "dct",
    exact: bool = False,
) -> torch.Tensor:
    """Inverse of `encode`: (num_tiles, totalk) coefficients -> a tensor of `shape` (`exact`: with the
    integer basis, see the module doc)."""
    _check_tiling(shape, tile)
    totalk = math.prod(tile)
    if (
        coefficients.dim() != 2
        or coefficients.shape[1] != totalk
        or coefficients.numel() != math.prod(shape)
    ):
        raise ValueError(
            f"coefficients {tuple(coefficients.shape)} do not fit shape {tuple(shape)} in tiles {tuple(tile)}"
        )
    bases = _bases(tile, coefficients.device, coefficients.dtype, transform, exact)
    if len(tile) == 1:
        return (coefficients @ bases[0]).reshape(shape)
    (n1, n2), (c1, c2) = tile, bases
    h, w = shape[-2:]
    bands = coefficients.reshape(-1, h // n1, w // n2, n1, n2).permute(0, 1, 3, 2, 4)
    cols = c1.T @ bands.reshape(-1, n1, w)
    return (cols.reshape(-1, n2) @ c2).reshape(shape)


def sparse_pays(terms_per_tile: int, tile: Sequence[int]) -> bool:
    """Whether `decode_sparse` of this many terms per tile needs no more memory than `decode`
    (it then also needs fewer operations)."""
    return terms_per_tile * sum(tile) <= math.prod(tile)


def decode_sparse(
    indices: torch.Tensor,
    values: torch.Tensor,
    tile: Sequence[int],
    shape: Sequence[int],
    transform: str = "dct",
    exact: bool = False,
) -> torch.Tensor:
    """`decode` of coefficients that are zero except k per tile, in k/(n1+n2) of its work.

    Each kept coefficient (a, b) of a 2-D tile adds value * outer(C1[a], C2[b]) to the tile, so a
    tile is one (n1 x k) @ (k x n2) product; indices/values are (num_tiles, k).
    """
    _check_tiling(shape, tile)
    if indices.shape != values.shape or indices.dim() != 2:
        raise ValueError(
            f"indices {tuple(indices.shape)} and values {tuple(values.shape)} must be equal 2-D"
        )
    bases = _bases(tile, values.device, values.dtype, transform, exact)
    if len(tile) == 1:
        return torch.bmm(values.unsqueeze(1), bases[0][indices]).reshape(shape)
    (n1, n2), (c1, c2) = tile, bases
    h, w = shape[-2:]
    rows = (c1[indices // n2] * values.unsqueeze(-1)).transpose(1, 2)  # (tiles, n1, k)
    tiles = torch.bmm(rows, c2[indices % n2])  # (tiles, n1, n2)
    return tiles.reshape(-1, h // n1, w // n2, n1, n2).permute(0, 1, 3, 2, 4).reshape(shape)
