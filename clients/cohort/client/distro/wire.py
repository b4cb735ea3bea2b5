"""The wire format of one client's result for one step, and its sha256 commitment.

Layout (all integers little-endian), version 2:

    header, 104 bytes
      magic        4s   b"CDTR"
      version      u16  1
      value_kind   u8   0 = 1-bit signs, 1 = bf16, 2 = fp16, 3 = fp32
      reserved     u8   0
      step         u64
      batch_start  u64
      batch_end    u64  (half-open: the interval [batch_start, batch_end) of sequence indices)
      num_params   u32
      num_buckets  u32
      layout       32s  sha256 of the tiling plan (names, shapes, tiles, top-k; see layout.py)
      state        32s  sha256 of the trainer's optimizer state after this step (verify/state.py), so the
                        payload's commitment binds it; zero when the run verifies nothing
    body, for each bucket in layout order (its parameters' tiles stacked in model order)
      indices      num_tiles * k * w bytes, w = 1/2/4 (narrowest width that holds totalk - 1),
                   strictly ascending inside each tile
      values       1-bit: ceil(num_tiles * k / 8) bytes of sign bits (1 = negative), LSB first,
                   unused high bits zero; otherwise num_tiles * k values of 2/2/4 bytes

Everything a receiver needs to size the body comes from its own plan, so decoding is strict:
any payload whose length, header, indices or values are not exactly what the plan allows is
rejected with a `WireError` that says what was wrong.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np
import torch

from .compress import SparseTiles, quantize_1bit, sign_of_bits
from .config import DistroConfig
from .layout import Bucket, Layout
from .result import BatchId, DistroResult, ReceivedResult

MAGIC = b"CDTR"
VERSION = 2
HEADER = struct.Struct("<4sHBBQQQII32s32s")
assert HEADER.size == 104

VALUE_KINDS = {"1bit": 0, "bf16": 1, "fp16": 2, "fp32": 3}
_VALUE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_INDEX_DTYPES = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}


class WireError(ValueError):
    """A payload that is not a valid result for this run's layout."""


def commitment(payload: bytes) -> bytes:
    """The sha256 a client commits to for its payload (header included)."""
    return hashlib.sha256(payload).digest()


def value_kind(config: DistroConfig) -> str:
    return "1bit" if config.quantize_1bit else config.value_dtype


def as_received(tiles: SparseTiles, kind: str) -> SparseTiles:
    """The values a receiver decodes for these tiles (rounded to the wire dtype, or +-1)."""
    if kind == "1bit":
        return quantize_1bit(tiles)
    return SparseTiles(tiles.indices, _rounded(tiles.values, kind))


def _rounded(values: torch.Tensor, kind: str) -> torch.Tensor:
    """Values as they come out of the wire dtype `kind` (bf16, fp16 or fp32), as float32."""
    if kind == "fp32":
        return values.float()
    return values.to(torch.bfloat16 if kind == "bf16" else torch.float16).float()


def _values_size(kind: str, count: int) -> int:
    return (count + 7) // 8 if kind == "1bit" else count * _VALUE_BYTES[kind]


@dataclass(frozen=True)
class WireCodec:
    """Encodes and strictly decodes results for one layout and value kind."""

    layout: Layout
    kind: str

    @classmethod
    def for_config(cls, layout: Layout, config: DistroConfig) -> WireCodec:
        return cls(layout, value_kind(config))

    def __post_init__(self) -> None:
        if self.kind not in VALUE_KINDS:
            raise ValueError(f"value kind must be one of {sorted(VALUE_KINDS)}, got {self.kind!r}")

    def bucket_size(self, b: Bucket) -> int:
        return b.kept * b.index_width + _values_size(self.kind, b.kept)

    @property
    def size(self) -> int:
        """Exact payload size in bytes: header + sum over buckets of indices and values."""
        return HEADER.size + sum(self.bucket_size(b) for b in self.layout.buckets)

    # -- encode ---------------------------------------------------------------------------

    def encode(self, result: DistroResult) -> bytes:
        """Serialize a result (unquantized values are quantized/rounded to the wire kind here)."""
        if len(result.tiles) != len(self.layout.buckets):
            raise ValueError(
                f"result has {len(result.tiles)} buckets, layout {len(self.layout.buckets)}"
            )
        if not (0 <= result.step < 1 << 64):
            raise ValueError(f"step must fit in u64, got {result.step}")
        if len(result.state) != 32:
            raise ValueError(f"the state commitment must be 32 bytes, got {len(result.state)}")
        parts = [
            HEADER.pack(
                MAGIC,
                VERSION,
                VALUE_KINDS[self.kind],
                0,
                result.step,
                result.batch.start,
                result.batch.end,
                len(self.layout.names),
                len(self.layout.buckets),
                self.layout.digest,
                result.state,
            )
        ]
        for b, tiles in zip(self.layout.buckets, result.tiles, strict=True):
            parts.append(self._encode_indices(b, tiles.indices))
            parts.append(self._encode_values(b, tiles.values))
        return b"".join(parts)

    def _encode_indices(self, b: Bucket, indices: torch.Tensor) -> bytes:
        if tuple(indices.shape) != (b.num_tiles, b.topk):
            raise ValueError(
                f"{_name(self.layout, b)}: indices shape {tuple(indices.shape)} "
                f"!= ({b.num_tiles}, {b.topk})"
            )
        idx = indices.detach().cpu().numpy()
        if idx.size and (idx.min() < 0 or idx.max() >= b.totalk):
            raise ValueError(f"{_name(self.layout, b)}: index out of range [0, {b.totalk})")
        return idx.astype(_INDEX_DTYPES[b.index_width]).tobytes()

    def _encode_values(self, b: Bucket, values: torch.Tensor) -> bytes:
        if tuple(values.shape) != (b.num_tiles, b.topk):
            raise ValueError(
                f"{_name(self.layout, b)}: values shape {tuple(values.shape)} "
                f"!= ({b.num_tiles}, {b.topk})"
            )
        v = values.detach().cpu().reshape(-1)
        if self.kind == "1bit":
            return np.packbits(torch.signbit(v).numpy(), bitorder="little").tobytes()
        # receivers reject non-finite values, so never send any (fp16 overflows above 65504)
        if not bool(torch.isfinite(_rounded(v, self.kind)).all()):
            raise ValueError(f"{_name(self.layout, b)}: values are not finite in {self.kind}")
        if self.kind == "bf16":
            return v.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        if self.kind == "fp16":
            return v.numpy().astype("<f2").tobytes()
        return v.numpy().astype("<f4").tobytes()

    # -- decode ---------------------------------------------------------------------------

    def decode(self, payload: bytes) -> ReceivedResult:
        """Parse and validate a peer's payload; raise `WireError` saying what is wrong."""
        data = bytes(payload)
        if len(data) < HEADER.size:
            raise WireError(
                f"truncated payload: {len(data)} bytes, the header alone is {HEADER.size}"
            )
        magic, version, kind, reserved, step, start, end, num_params, num_buckets, digest, state = (
            HEADER.unpack_from(data, 0)
        )
        if magic != MAGIC:
            raise WireError(f"not a DisTrO result: magic {magic!r} != {MAGIC!r}")
        if version != VERSION:
            raise WireError(f"unsupported wire version {version} (this client speaks {VERSION})")
        if reserved:
            raise WireError("the reserved header byte must be zero")
        if kind != VALUE_KINDS[self.kind]:
            raise WireError(
                f"value kind {kind} != this run's {VALUE_KINDS[self.kind]} ({self.kind})"
            )
        if num_params != len(self.layout.names) or num_buckets != len(self.layout.buckets):
            raise WireError(
                f"payload has {num_params} parameters in {num_buckets} buckets, this model has "
                f"{len(self.layout.names)} in {len(self.layout.buckets)}"
            )
        if digest != self.layout.digest:
            raise WireError(
                "parameter layout mismatch: shapes, tiles or top-k differ from this run's"
            )
        if start >= end:
            raise WireError(f"batch id [{start}, {end}) is empty")
        if len(data) < self.size:
            raise WireError(f"truncated payload: {len(data)} bytes, expected {self.size}")
        if len(data) > self.size:
            raise WireError(f"oversized payload: {len(data)} bytes, expected {self.size}")
        offset = HEADER.size
        tiles = []
        for b in self.layout.buckets:
            indices, offset = self._decode_indices(b, data, offset)
            values, offset = self._decode_values(b, data, offset)
            tiles.append(SparseTiles(indices, values))
        result = DistroResult(step=step, batch=BatchId(start, end), tiles=tuple(tiles), state=state)
        return ReceivedResult(result=result, commitment=commitment(data))

    def _decode_indices(self, b: Bucket, data: bytes, offset: int) -> tuple[torch.Tensor, int]:
        raw = np.frombuffer(data, dtype=_INDEX_DTYPES[b.index_width], count=b.kept, offset=offset)
        idx = raw.astype(np.int64).reshape(b.num_tiles, b.topk)
        if idx.size and idx.max() >= b.totalk:
            raise WireError(
                f"{_name(self.layout, b)}: index {int(idx.max())} out of range for a tile of {b.totalk}"
            )
        if b.topk > 1 and not (idx[:, 1:] > idx[:, :-1]).all():
            raise WireError(
                f"{_name(self.layout, b)}: indices inside a tile must be strictly ascending (no repeats)"
            )
        return torch.from_numpy(idx), offset + b.kept * b.index_width

    def _decode_values(self, b: Bucket, data: bytes, offset: int) -> tuple[torch.Tensor, int]:
        size = _values_size(self.kind, b.kept)
        raw = np.frombuffer(data, dtype=np.uint8, count=size, offset=offset)
        if self.kind == "1bit":
            if b.kept % 8 and raw[-1] >> (b.kept % 8):
                raise WireError(
                    f"{_name(self.layout, b)}: unused sign bits in the last byte must be zero"
                )
            bits = np.unpackbits(raw, count=b.kept, bitorder="little")
            values = sign_of_bits(torch.from_numpy(bits))
        else:
            if self.kind == "bf16":
                values = (
                    torch.from_numpy(raw.view("<i2").astype(np.int16)).view(torch.bfloat16).float()
                )
            else:
                values = torch.from_numpy(
                    raw.view("<f2" if self.kind == "fp16" else "<f4").astype(np.float32)
                )
            if not bool(torch.isfinite(values).all()):
                raise WireError(f"{_name(self.layout, b)}: values must be finite")
        return values.reshape(b.num_tiles, b.topk), offset + size


def _name(layout: Layout, b: Bucket) -> str:
    """A readable name for a bucket in errors: its first parameter (and how many share it)."""
    first = layout.names[b.members[0]]
    return first if len(b.members) == 1 else f"{first} (+{len(b.members) - 1} of the same shape)"
