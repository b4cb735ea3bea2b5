"""The apply is exact arithmetic rounded once (aggregate.py): its signs are those of a plain integer
computation, and they do not depend on how a bucket is cut into slices (the unit a sharded member or a
device with little memory works in), on thread counts (test_process_determinism) or on arrival order."""

import itertools

import pytest
import torch

from cohort.client.distro import BatchId, Constant, DistroConfig, DistroOptimizer, plan_layout
from cohort.client.distro import optimizer as optimizer_module
from cohort.client.distro.aggregate import (
    aggregate_signs,
    band_directions,
    bounded_values,
    value_bits,
)
from cohort.client.distro.compress import compress
from cohort.client.distro.dct import encode, exact_basis
from cohort.client.distro.result import DistroResult, ReceivedResult
from cohort.client.distro.wire import WireCodec
from cohort.client.model import build_model, llama_config, parameter_digest

SHAPES = [("w1", (16, 24)), ("w2", (16, 24)), ("b", (24,))]


def _results(config: DistroConfig, n: int) -> tuple:
    layout = plan_layout(SHAPES, config)
    codec = WireCodec.for_config(layout, config)
    out = []
    for peer in range(n):
        generator = torch.Generator().manual_seed(300 + peer)
        tiles = tuple(
            compress(encode(torch.randn(b.stacked_shape, generator=generator), b.tile), b.topk)
            for b in layout.buckets
        )
        out.append(codec.decode(codec.encode(DistroResult(5, BatchId(peer, peer + 1), tiles))))
    return layout, out


def _integer_signs(layout, received: list[ReceivedResult]) -> list[list[int]]:
    """The rule in Python integers, tile by tile: no float arithmetic after the per-value rounding."""
    ordered = sorted(received, key=lambda r: r.commitment)
    out = []
    for i, b in enumerate(layout.buckets):
        q = value_bits(len(ordered) * b.topk, b.tile)
        bases = [
            [[int(x) for x in row] for row in exact_basis(n, torch.device("cpu")).tolist()]
            for n in b.tile
        ]
        coefficients = [[0] * b.totalk for _ in range(b.num_tiles)]
        for r in ordered:
            values = torch.round(bounded_values(r.result.tiles[i].values).double() * 2**q)
            for t, (idx, val) in enumerate(
                zip(r.result.tiles[i].indices.tolist(), values.tolist(), strict=True)
            ):
                for k, v in zip(idx, val, strict=True):
                    coefficients[t][k] += int(v)
        signs = []
        for t in range(b.num_tiles):
            if len(b.tile) == 1:
                (c,) = bases
                tile = [
                    sum(coefficients[t][k] * c[k][j] for k in range(b.tile[0]))
                    for j in range(b.tile[0])
                ]
            else:
                (n1, n2), (c1, c2) = b.tile, bases
                tile = [
                    sum(
                        coefficients[t][a * n2 + bb] * c1[a][x] * c2[bb][y]
                        for a in range(n1)
                        for bb in range(n2)
                    )
                    for x in range(n1)
                    for y in range(n2)
                ]
            signs.append([(v > 0) - (v < 0) for v in tile])
        out.append(signs)
    return out


@pytest.mark.parametrize(
    ("quantize", "chunk", "topk"), [(True, 8, 6), (False, 8, 6), (False, 8, 40)]
)
def test_signs_are_those_of_integer_arithmetic(quantize, chunk, topk):
    config = DistroConfig(
        compression_chunk=chunk, compression_topk=topk, quantize_1bit=quantize, value_dtype="fp32"
    )
    layout, received = _results(config, 3)
    expected = _integer_signs(layout, received)
    for b, signs, ints in zip(
        layout.buckets, aggregate_signs(layout, received), expected, strict=True
    ):
        # tiles in the order encode numbers them: (member, band, column block), each row-major
        tiles = (
            encode(signs, b.tile, "identity") if len(b.tile) == 2 else signs.reshape(-1, b.tile[0])
        )
        assert tiles.to(torch.int64).tolist() == ints


@pytest.mark.parametrize("max_elements", [1, 24, 100, 16 * 24 + 8, 10_000])
def test_band_slices_give_the_whole_buckets_signs(max_elements):
    layout, received = _results(DistroConfig(compression_chunk=8, compression_topk=6), 4)
    whole = aggregate_signs(layout, received)
    pieces: dict[int, list[torch.Tensor]] = {}
    for band, direction in band_directions(layout, received, max_elements):
        assert direction.numel() <= max(max_elements, band.bucket.band_rows * band.bucket.row_width)
        pieces.setdefault(layout.buckets.index(band.bucket), []).append(direction)
    for i, b in enumerate(layout.buckets):
        assert torch.equal(torch.cat(pieces[i]).view(b.stacked_shape), whole[i])


def test_arrival_order_and_slicing_leave_the_weights_bit_identical(monkeypatch, fill_grads):
    config = DistroConfig(compression_chunk=32, compression_topk=8)
    payloads = []
    for peer in range(3):
        model = build_model(llama_config("tiny"), seed=0)
        optimizer = DistroOptimizer(model.named_parameters(), config, Constant(1e-3))
        fill_grads(model, seed=peer)
        payloads.append(optimizer.codec.encode(optimizer.generate(0, BatchId(peer, peer + 1))))
    digests = set()
    for slice_elements, order in itertools.product([1 << 23, 4096, 1], [(0, 1, 2), (2, 0, 1)]):
        monkeypatch.setattr(optimizer_module, "SLICE_ELEMENTS", slice_elements)
        model = build_model(llama_config("tiny"), seed=0)
        optimizer = DistroOptimizer(model.named_parameters(), config, Constant(1e-3))
        optimizer.apply(2, [optimizer.codec.decode(payloads[i]) for i in order])
        digests.add(parameter_digest(model))
    assert len(digests) == 1


def test_lookahead_keeps_only_the_weights_it_cannot_recompute(fill_grads):
    """The exact undo stores the few weights where w - a + a != w, not a clone of every weight."""
    model = build_model(llama_config("tiny"), seed=0)
    optimizer = DistroOptimizer(model.named_parameters(), DistroConfig(), Constant(1e-3))
    fill_grads(model, seed=1)
    optimizer.generate(0, BatchId(0, 1))
    before = parameter_digest(model)
    optimizer.lookahead(1)
    assert parameter_digest(model) != before
    kept = sum(where.numel() for where, _ in optimizer._saved.fixes)
    assert kept < 0.1 * sum(p.numel() for p in model.parameters())
    optimizer.abandon_step()
    assert parameter_digest(model) == before


def test_too_many_terms_for_an_exact_apply_are_refused():
    assert value_bits(3 * 32, (64, 64)) == 12
    assert value_bits(1 << 20, (64, 64)) == 4
    with pytest.raises(ValueError, match="too many for an exact apply"):
        value_bits(1 << 30, (64, 64))
