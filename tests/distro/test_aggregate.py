import itertools

import pytest
import torch

from cohort.client.distro import (
    BatchId,
    DistroConfig,
    DistroResult,
    ReceivedResult,
    WireCodec,
    plan_layout,
)
from cohort.client.distro.aggregate import (
    aggregate_signs,
    aggregate_update,
    bounded_values,
    mean_coefficients,
    value_bits,
)
from cohort.client.distro.compress import SparseTiles, compress
from cohort.client.distro.dct import BASIS_BITS, decode, encode, sparse_pays

SHAPES = [("w1", (24, 32)), ("w2", (24, 32)), ("b", (32,)), ("e", (40, 8))]


def peers(config: DistroConfig, n: int) -> tuple[WireCodec, list[bytes]]:
    layout = plan_layout(SHAPES, config)
    codec = WireCodec.for_config(layout, config)
    payloads = []
    for peer in range(n):
        generator = torch.Generator().manual_seed(100 + peer)
        tiles = tuple(
            compress(encode(torch.randn(b.stacked_shape, generator=generator), b.tile), b.topk)
            for b in layout.buckets
        )
        payloads.append(codec.encode(DistroResult(7, BatchId(peer, peer + 1), tiles)))
    return codec, payloads


def fingerprint(tensors: list[torch.Tensor]) -> bytes:
    return b"".join(t.contiguous().numpy().tobytes() for t in tensors)


# chunk 8 / top-6: few large terms, dense inverse DCT; chunk 32 / top-2: term-by-term (sparse)
ORDERS = [(True, 8, 6), (False, 8, 6), (True, 32, 2), (False, 32, 2)]


@pytest.mark.parametrize(("quantize", "chunk", "topk"), ORDERS)
def test_every_arrival_order_gives_identical_bytes(quantize, chunk, topk):
    config = DistroConfig(
        compression_chunk=chunk, compression_topk=topk, quantize_1bit=quantize, value_dtype="fp32"
    )
    codec, payloads = peers(config, 4)
    seen_means, seen_signs = set(), set()
    for order in itertools.permutations(payloads):
        received = [codec.decode(p) for p in order]
        seen_means.add(fingerprint(list(mean_coefficients(codec.layout, received))))
        seen_signs.add(fingerprint(aggregate_signs(codec.layout, received)))
    assert len(seen_means) == 1 and len(seen_signs) == 1


@pytest.mark.parametrize(("quantize", "chunk", "topk"), ORDERS)
def test_sparse_and_dense_inverse_agree(quantize, chunk, topk):
    config = DistroConfig(
        compression_chunk=chunk, compression_topk=topk, quantize_1bit=quantize, value_dtype="fp32"
    )
    codec, payloads = peers(config, 4)
    received = [codec.decode(p) for p in payloads]
    means = mean_coefficients(codec.layout, received)
    updates = aggregate_update(codec.layout, received)
    assert any(sparse_pays(4 * b.topk, b.tile) for b in codec.layout.buckets) == (chunk == 32)
    for b, mean, update in zip(codec.layout.buckets, means, updates, strict=True):
        # the exact update is the real one scaled by N * 2**q * 2**(BASIS_BITS * dims), up to its roundings
        expected = decode(mean.double(), b.tile, b.stacked_shape)
        scale = 4 * 2 ** value_bits(4 * b.topk, b.tile) * 2 ** (BASIS_BITS * len(b.tile))
        assert torch.equal(update, update.round())  # integers, hence exact in float64
        torch.testing.assert_close(update / scale, expected, rtol=0, atol=2e-3)


def _one_tile_result(indices, values, tag) -> ReceivedResult:
    tiles = SparseTiles(torch.tensor([indices]), torch.tensor([values]))
    return ReceivedResult(DistroResult(0, BatchId(0, 1), (tiles,)), commitment=bytes([tag]) * 32)


def test_aggregate_is_the_mean_over_all_results_of_per_tile_bounded_values():
    """a's values / 4, b's / 6, then each position summed over results and divided by N = 2
    (DeMo's scatter-mean would give [1, 3, 0, -6]: the mean over the pickers, raw values)."""
    layout = plan_layout([("v", (4,))], DistroConfig(compression_chunk=4, compression_topk=2))
    a = _one_tile_result([0, 1], [1.0, 4.0], 1)
    b = _one_tile_result([1, 3], [2.0, -6.0], 2)
    (mean,) = mean_coefficients(layout, [a, b])
    torch.testing.assert_close(
        mean, torch.tensor([[0.125, (1.0 + 1.0 / 3.0) / 2.0, 0.0, -0.5]]), rtol=0, atol=1e-7
    )


def test_bounded_values():
    v = torch.tensor([[1e30, -3e30, 0.0], [0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [1e-42, -2e-42, 0.0]])
    bounded = bounded_values(v)
    assert bounded.abs().max() <= 1.0 and torch.isfinite(bounded).all()
    assert bounded[0].tolist() == pytest.approx([1 / 3, -1.0, 0.0])
    assert bounded[1].tolist() == [0.0, 0.0, 0.0]  # an all-zero tile stays zero, no NaN
    assert bounded[2].tolist() == [1.0, -1.0, 1.0]  # 1-bit values are unchanged
    assert bounded[3, 1] == -1.0  # subnormal tiles are bounded too
    assert bool((bounded.abs().amax(dim=1)[[0, 2, 3]] == 1.0).all())


@pytest.mark.parametrize("scale", [1.0, 1e30, -1e30])
def test_one_result_moves_every_coefficient_by_at_most_one_nth(scale):
    """coef(H + x) = ((N - 1) * coef(H) + bounded(x)) / N, so |coef(H + x) - (N-1)/N coef(H)| <= 1/N."""
    config = DistroConfig(
        compression_chunk=8, compression_topk=6, quantize_1bit=False, value_dtype="fp32"
    )
    codec, payloads = peers(config, 4)
    honest = [codec.decode(p) for p in payloads[:3]]
    x = codec.decode(payloads[3])
    x = ReceivedResult(
        DistroResult(
            7,
            x.result.batch,
            tuple(SparseTiles(t.indices, t.values * scale) for t in x.result.tiles),
        ),
        x.commitment,
    )
    for without, with_x in zip(
        mean_coefficients(codec.layout, honest),
        mean_coefficients(codec.layout, [*honest, x]),
        strict=True,
    ):
        moved = (with_x - without * 3 / 4).abs().max()
        assert float(moved) <= 1 / 4 + 1e-6


def test_repeated_or_mixed_step_results_are_rejected():
    codec, payloads = peers(DistroConfig(compression_chunk=8, compression_topk=2), 2)
    r = codec.decode(payloads[0])
    with pytest.raises(ValueError, match="given twice"):
        aggregate_signs(codec.layout, [r, r])
    other = ReceivedResult(DistroResult(8, r.result.batch, r.result.tiles), commitment=b"\xff" * 32)
    with pytest.raises(ValueError, match=r"different steps cannot be aggregated: \[7, 8\]"):
        aggregate_signs(codec.layout, [r, other])
