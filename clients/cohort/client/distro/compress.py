"""Top-k per tile, 1-bit sign quantization, and back to dense tile coefficients."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SparseTiles:
    """The kept coefficients of one parameter.

    indices: int64 (num_tiles, k), positions inside each flattened tile, strictly ascending per row
             (a canonical order, so equal selections always serialize to equal bytes).
    values:  float32 (num_tiles, k), the coefficient at each position (+-1 after 1-bit quantization).
    """

    indices: torch.Tensor
    values: torch.Tensor


def compress(coefficients: torch.Tensor, topk: int) -> SparseTiles:
    """Keep the `topk` largest-|coefficient| entries of every row of a (num_tiles, totalk) matrix."""
    if coefficients.dim() != 2:
        raise ValueError(
            f"expected (num_tiles, totalk) coefficients, got shape {tuple(coefficients.shape)}"
        )
    k = max(1, min(topk, coefficients.shape[1]))
    picked = torch.topk(coefficients.abs(), k, dim=1, sorted=False).indices
    indices, _ = picked.sort(dim=1)
    return SparseTiles(indices=indices, values=coefficients.gather(1, indices).float())


def quantize_1bit(tiles: SparseTiles) -> SparseTiles:
    """What a 1-bit receiver sees: each kept value replaced by 1 - 2*signbit, i.e. +-1."""
    return SparseTiles(tiles.indices, sign_of_bits(torch.signbit(tiles.values)))


def sign_of_bits(bits: torch.Tensor) -> torch.Tensor:
    """Sign bits (True = negative) -> float32 +-1."""
    return 1.0 - 2.0 * bits.float()


def one_bit_reconstruction(tiles: SparseTiles) -> SparseTiles:
    """The best a sign code can say about the values: s * sign per tile, s = mean |value|.

    s minimises the squared error of the sign code (as in EF-signSGD); error feedback removes
    this instead of the unquantized values, so the part the sign lost stays in the momentum.
    """
    scale = tiles.values.abs().mean(dim=1, keepdim=True)
    return SparseTiles(tiles.indices, scale * quantize_1bit(tiles).values)


def densify(tiles: SparseTiles, totalk: int) -> torch.Tensor:
    """One result's sparse tiles -> dense (num_tiles, totalk) coefficients (zeros elsewhere)."""
    dense = torch.zeros(
        tiles.indices.shape[0], totalk, dtype=tiles.values.dtype, device=tiles.values.device
    )
    return dense.scatter_(1, tiles.indices, tiles.values)
