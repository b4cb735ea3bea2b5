import dataclasses
import hashlib
import struct

import pytest
import torch

from cohort.client.distro import (
    BatchId,
    DistroConfig,
    DistroResult,
    WireCodec,
    WireError,
    plan_layout,
)
from cohort.client.distro.compress import compress
from cohort.client.distro.dct import encode
from cohort.client.distro.wire import HEADER

SHAPES = [("embed", (40, 16)), ("q", (16, 16)), ("k", (16, 16)), ("norm", (16,)), ("odd", (7, 5))]


def make(config: DistroConfig, seed: int = 0, step: int = 3) -> tuple[WireCodec, DistroResult]:
    layout = plan_layout(SHAPES, config)
    generator = torch.Generator().manual_seed(seed)
    tiles = tuple(
        compress(encode(torch.randn(b.stacked_shape, generator=generator), b.tile), b.topk)
        for b in layout.buckets
    )
    return WireCodec.for_config(layout, config), DistroResult(step, BatchId(8, 16), tiles)


def config_for(kind: str) -> DistroConfig:
    """Chunk 8, top-3, with the given wire value kind."""
    return DistroConfig(
        compression_chunk=8,
        compression_topk=3,
        quantize_1bit=kind == "1bit",
        value_dtype="bf16" if kind == "1bit" else kind,
    )


ONE_BIT = config_for("1bit")


@pytest.mark.parametrize("kind", ["1bit", "bf16", "fp16", "fp32"])
def test_round_trip(kind):
    codec, result = make(config_for(kind))
    payload = codec.encode(result)
    received = codec.decode(payload)
    assert received.result.step == 3 and received.result.batch == BatchId(8, 16)
    assert received.commitment == hashlib.sha256(payload).digest()
    for sent, got in zip(result.tiles, received.result.tiles, strict=True):
        assert torch.equal(sent.indices, got.indices)
        if kind == "1bit":
            assert torch.equal(got.values, torch.where(sent.values < 0, -1.0, 1.0))
        elif kind == "fp32":
            assert torch.equal(got.values, sent.values)
        else:
            dtype = torch.bfloat16 if kind == "bf16" else torch.float16
            assert torch.equal(got.values, sent.values.to(dtype).float())
    # deterministic bytes
    assert codec.encode(result) == payload
    # the state commitment travels in the header, so the payload's commitment covers it
    committed = codec.encode(dataclasses.replace(result, state=b"s" * 32))
    assert codec.decode(committed).result.state == b"s" * 32 and committed != payload


@pytest.mark.parametrize(("kind", "value_bits"), [("1bit", 1), ("bf16", 16), ("fp32", 32)])
def test_size_is_the_formula(kind, value_bits):
    codec, result = make(config_for(kind))
    expected = HEADER.size  # 104
    for b in codec.layout.buckets:
        kept = b.num_tiles * b.topk
        width = 1 if b.totalk <= 256 else 2
        expected += kept * width + (kept * value_bits + 7) // 8
    assert codec.size == expected == len(codec.encode(result))


def test_index_width_follows_tile_size():
    layout = plan_layout(
        [("a", (64, 64)), ("b", (16, 16)), ("c", (300,))], DistroConfig(compression_chunk=64)
    )
    assert [b.index_width for b in layout.buckets] == [2, 1, 1]  # 4096, 256 and 60 per tile


# -- malformed payloads: a peer can send anything ---------------------------------------------


@pytest.fixture
def good():
    codec, result = make(ONE_BIT)
    return codec, codec.encode(result)


def _header(payload: bytes) -> list:
    return list(HEADER.unpack_from(payload, 0))


def _with_header(payload: bytes, **changes) -> bytes:
    names = [
        "magic",
        "version",
        "kind",
        "reserved",
        "step",
        "start",
        "end",
        "params",
        "buckets",
        "digest",
        "state",
    ]
    fields = dict(zip(names, _header(payload), strict=True))
    fields.update(changes)
    return HEADER.pack(*fields.values()) + payload[HEADER.size :]


def test_rejects_truncated(good):
    codec, payload = good
    with pytest.raises(WireError, match="truncated payload: 10 bytes, the header"):
        codec.decode(payload[:10])
    with pytest.raises(WireError, match="truncated payload"):
        codec.decode(payload[:-1])


def test_rejects_oversized(good):
    codec, payload = good
    with pytest.raises(WireError, match="oversized payload"):
        codec.decode(payload + b"\0")


def test_rejects_wrong_magic_version_kind_reserved(good):
    codec, payload = good
    with pytest.raises(WireError, match="not a DisTrO result"):
        codec.decode(_with_header(payload, magic=b"XXXX"))
    with pytest.raises(WireError, match="unsupported wire version 1"):
        codec.decode(_with_header(payload, version=1))  # v1 had no state commitment
    with pytest.raises(WireError, match="value kind 3"):
        codec.decode(_with_header(payload, kind=3))
    with pytest.raises(WireError, match="reserved"):
        codec.decode(_with_header(payload, reserved=1))


def test_rejects_mismatched_shapes(good):
    codec, payload = good
    with pytest.raises(WireError, match="6 parameters in 4 buckets, this model has 5 in 4"):
        codec.decode(_with_header(payload, params=6))
    other = plan_layout(
        [(n, (s[0] + 8, *s[1:])) if n == "embed" else (n, s) for n, s in SHAPES], ONE_BIT
    )
    with pytest.raises(WireError, match="layout mismatch"):
        WireCodec.for_config(other, ONE_BIT).decode(payload)
    with pytest.raises(WireError, match=r"batch id \[9, 2\) is empty"):
        codec.decode(_with_header(payload, start=9, end=2))
    with pytest.raises(WireError, match=r"batch id \[9, 9\) is empty"):
        codec.decode(_with_header(payload, start=9, end=9))


def _index_offset(codec: WireCodec, bucket: int) -> int:
    return HEADER.size + sum(codec.bucket_size(b) for b in codec.layout.buckets[:bucket])


def test_rejects_out_of_range_index(good):
    codec, payload = good
    # bucket 3 is the (7, 5) parameter: one 7x5 tile of 35 coefficients, u8 indices
    at = _index_offset(codec, 3)
    bad = payload[:at] + bytes([0, 1, 35]) + payload[at + 3 :]
    with pytest.raises(WireError, match="odd: index 35 out of range for a tile of 35"):
        codec.decode(bad)


def test_rejects_repeated_or_unsorted_indices(good):
    codec, payload = good
    at = _index_offset(codec, 3)
    for indices in ([0, 1, 1], [2, 1, 3]):
        bad = payload[:at] + bytes(indices) + payload[at + 3 :]
        with pytest.raises(WireError, match="strictly ascending"):
            codec.decode(bad)


def test_rejects_nonzero_padding_bits(good):
    codec, payload = good
    # bucket 3 keeps 3 coefficients: its single sign byte may only use the low 3 bits
    at = _index_offset(codec, 3) + 3
    bad = payload[:at] + bytes([payload[at] | 0x80]) + payload[at + 1 :]
    with pytest.raises(WireError, match="unused sign bits"):
        codec.decode(bad)


def test_rejects_non_finite_values():
    codec, result = make(config_for("fp32"))
    payload = codec.encode(result)
    at = _index_offset(codec, 3) + 3
    bad = payload[:at] + struct.pack("<f", float("nan")) + payload[at + 4 :]
    with pytest.raises(WireError, match="odd: values must be finite"):
        codec.decode(bad)


def test_encode_refuses_values_receivers_would_reject():
    codec, result = make(config_for("fp16"))
    big = result.tiles[0].values.clone()
    big[0, 0] = 1e6  # beyond fp16
    tiles = (type(result.tiles[0])(result.tiles[0].indices, big), *result.tiles[1:])
    with pytest.raises(ValueError, match="not finite in fp16"):
        codec.encode(DistroResult(0, BatchId(0, 1), tiles))


def test_wrong_value_kind_for_run():
    codec, result = make(ONE_BIT)
    payload = codec.encode(result)
    bf16 = WireCodec(codec.layout, "bf16")
    with pytest.raises(WireError, match=r"value kind 0 != this run's 1 \(bf16\)"):
        bf16.decode(payload)


def test_encode_validates_input():
    codec, result = make(ONE_BIT)
    with pytest.raises(ValueError, match="buckets"):
        codec.encode(DistroResult(0, BatchId(0, 1), result.tiles[:2]))
    with pytest.raises(ValueError, match="start < end"):
        BatchId(5, 5)
    with pytest.raises(ValueError, match="value kind"):
        WireCodec(codec.layout, "int8")
