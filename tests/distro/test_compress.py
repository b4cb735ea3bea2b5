import torch

from cohort.client.distro import BatchId, DistroConfig, DistroResult, WireCodec, plan_layout
from cohort.client.distro.aggregate import aggregate_signs
from cohort.client.distro.compress import (
    SparseTiles,
    compress,
    densify,
    one_bit_reconstruction,
    quantize_1bit,
)
from cohort.client.distro.dct import encode


def test_topk_keeps_largest_magnitudes_in_ascending_positions():
    coefficients = torch.tensor([[0.1, -5.0, 0.2, 3.0, -0.3], [1.0, 2.0, -3.0, 4.0, -5.0]])
    tiles = compress(coefficients, 2)
    assert tiles.indices.tolist() == [[1, 3], [3, 4]]
    assert tiles.values.tolist() == [[-5.0, 3.0], [4.0, -5.0]]


def test_topk_is_clamped_to_tile_size():
    tiles = compress(torch.randn(3, 4), 10)
    assert tiles.indices.tolist() == [[0, 1, 2, 3]] * 3


def test_densify_round_trip():
    coefficients = torch.randn(6, 16)
    tiles = compress(coefficients, 16)
    assert torch.equal(densify(tiles, 16), coefficients)
    sparse = densify(compress(coefficients, 3), 16)
    assert int((sparse != 0).sum()) == 6 * 3
    assert torch.equal(sparse[sparse != 0], coefficients[sparse != 0])


def test_quantize_and_one_bit_reconstruction():
    tiles = SparseTiles(torch.tensor([[0, 2]]), torch.tensor([[-3.0, 1.0]]))
    assert quantize_1bit(tiles).values.tolist() == [[-1.0, 1.0]]
    # the per-tile scale is the mean magnitude: 2 * sign
    assert one_bit_reconstruction(tiles).values.tolist() == [[-2.0, 2.0]]


def test_full_topk_pipeline_reproduces_sign_of_momentum_exactly():
    """compress with k = tile size -> wire bytes (fp32) -> decode -> aggregate == sign(momentum)."""
    generator = torch.Generator().manual_seed(1)
    shapes = [("w", (32, 48)), ("b", (48,)), ("v", (3, 16, 8))]
    config = DistroConfig(
        compression_chunk=16, compression_topk=16 * 16, quantize_1bit=False, value_dtype="fp32"
    )
    layout = plan_layout(shapes, config)
    # magnitudes bounded away from zero, so no sign can flip in the float round trip
    momentum = [
        (torch.rand(b.stacked_shape, generator=generator) + 0.5)
        * torch.where(torch.rand(b.stacked_shape, generator=generator) < 0.5, -1.0, 1.0)
        for b in layout.buckets
    ]
    tiles = tuple(
        compress(encode(m, b.tile), b.topk) for b, m in zip(layout.buckets, momentum, strict=True)
    )
    codec = WireCodec.for_config(layout, config)
    received = codec.decode(codec.encode(DistroResult(0, BatchId(0, 1), tiles)))
    for sign, m in zip(aggregate_signs(layout, [received]), momentum, strict=True):
        assert torch.equal(sign, m.sign())
