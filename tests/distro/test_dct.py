import math

import pytest
import torch

from cohort.client.distro.dct import dct_basis, decode, decode_sparse, encode
from cohort.client.distro.layout import chunk_size, tile_for


@pytest.mark.parametrize("n", [1, 2, 4, 5, 16, 64])
def test_basis_is_orthonormal(n):
    c = dct_basis(n, torch.device("cpu"), torch.float64)
    torch.testing.assert_close(c @ c.T, torch.eye(n, dtype=torch.float64), rtol=0, atol=1e-12)


def test_basis_is_dct_ii():
    n = 8
    c = dct_basis(n, torch.device("cpu"), torch.float64)
    x = torch.randn(n, dtype=torch.float64)
    direct = torch.tensor(
        [
            math.sqrt((1 if k == 0 else 2) / n)
            * sum(float(x[j]) * math.cos(math.pi * (2 * j + 1) * k / (2 * n)) for j in range(n))
            for k in range(n)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(c @ x, direct, rtol=0, atol=1e-12)
    # DCT of a unit impulse is the first column of the basis: the known values for n = 4
    c4 = dct_basis(4, torch.device("cpu"), torch.float64)
    expected = torch.tensor([0.5, 0.6532814824, 0.5, 0.2705980501], dtype=torch.float64)
    torch.testing.assert_close(c4[:, 0], expected, rtol=0, atol=1e-9)


def test_basis_is_cached_per_size_and_device():
    a = dct_basis(16, torch.device("cpu"), torch.float32)
    assert a is dct_basis(16, torch.device("cpu"), torch.float32)
    assert a is not dct_basis(8, torch.device("cpu"), torch.float32)


@pytest.mark.parametrize(
    ("dim", "target", "expected"),
    [
        (100, 26, 25),
        (12, 5, 4),
        (97, 64, 1),  # a prime larger than the chunk: 1-wide tiles
        (7, 64, 7),  # smaller than the chunk: the whole dimension
        (64, 64, 64),
        (384, 64, 64),
        (2048, 64, 64),
        (5632, 64, 64),
        (96, 64, 48),
        (1, 64, 1),
    ],
)
def test_chunk_is_largest_divisor_not_above_target(dim, target, expected):
    assert chunk_size(dim, target) == expected


def test_chunk_rejects_nonsense():
    with pytest.raises(ValueError, match="dim >= 1"):
        chunk_size(0, 4)


def test_tiles_2d_and_1d():
    assert tile_for((384, 128), 64) == (64, 64)
    assert tile_for((97, 12), 8) == (1, 6)
    assert tile_for((300,), 64) == (60,)
    assert tile_for((3, 20, 30), 16) == (10, 15)  # higher-rank: the last two dims


@pytest.mark.parametrize(
    ("shape", "tile"),
    [
        ((128, 384), (64, 64)),
        ((3, 20, 30), (10, 15)),
        ((97, 12), (1, 6)),
        ((300,), (60,)),
        ((4, 7), (4, 7)),
    ],
)
def test_inverse_round_trip(shape, tile):
    x = torch.randn(shape, dtype=torch.float64)
    coefficients = encode(x, tile)
    assert coefficients.shape == (x.numel() // math.prod(tile), math.prod(tile))
    torch.testing.assert_close(decode(coefficients, tile, shape), x, rtol=0, atol=1e-12)


def test_encode_rows_are_per_tile_2d_dct():
    x = torch.randn(8, 12, dtype=torch.float64)
    tile = (4, 6)
    coefficients = encode(x, tile)
    c1 = dct_basis(4, torch.device("cpu"), torch.float64)
    c2 = dct_basis(6, torch.device("cpu"), torch.float64)
    # tile (row band 1, column band 0) is the third row of the coefficient matrix (tile grid first)
    block = x[4:8, 0:6]
    torch.testing.assert_close(coefficients[2].view(4, 6), c1 @ block @ c2.T, rtol=0, atol=1e-12)


def test_stacked_tensors_transform_independently():
    xs = torch.randn(3, 16, 32, dtype=torch.float64)
    stacked = encode(xs, (8, 8))
    single = torch.cat([encode(x, (8, 8)) for x in xs])
    torch.testing.assert_close(stacked, single, rtol=0, atol=1e-12)


def test_energy_is_preserved():
    x = torch.randn(64, 64, dtype=torch.float64)
    assert float(encode(x, (16, 16)).norm()) == pytest.approx(float(x.norm()), rel=1e-12)


def test_bad_tiling_is_rejected():
    with pytest.raises(ValueError, match="does not divide"):
        encode(torch.zeros(10, 10), (3, 3))
    with pytest.raises(ValueError, match="do not fit"):
        decode(torch.zeros(4, 9), (3, 3), (9, 9))


@pytest.mark.parametrize(
    ("shape", "tile", "k"),
    [((2, 128, 64), (64, 32), 4), ((3, 20, 30), (10, 15), 7), ((300,), (60,), 5)],
)
def test_sparse_decode_equals_dense_decode(shape, tile, k):
    from cohort.client.distro.compress import compress, densify

    kept = compress(encode(torch.randn(shape, dtype=torch.float64), tile), k)
    dense = decode(densify(kept, math.prod(tile)), tile, shape)
    sparse = decode_sparse(kept.indices, kept.values, tile, shape)
    # fp32 values summed in two orders
    torch.testing.assert_close(sparse, dense, rtol=0, atol=1e-5)
