"""The tiling plan: how each parameter is cut into DCT tiles and how many coefficients it sends.

Parameters of the same shape (every layer's q_proj, say) share one tile plan and are processed
and serialized together as a *bucket*, so the work per step is a few large tensor operations
instead of many small ones. Every replica derives the same plan from the model's parameter
shapes and the DisTrO config, so a payload can be decoded strictly against it; the plan's
sha256 travels in each payload header so that a mismatch is reported as such.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from .config import DistroConfig


def chunk_size(dim: int, target: int) -> int:
    """The largest divisor of `dim` that is <= `target` (`dim` itself when dim <= target)."""
    if dim < 1 or target < 1:
        raise ValueError(
            f"chunk_size needs dim >= 1 and target >= 1, got dim={dim} target={target}"
        )
    if dim <= target:
        return dim
    return max(d for d in range(1, target + 1) if dim % d == 0)


def tile_for(shape: Sequence[int], target: int) -> tuple[int, ...]:
    """Tile edges of a parameter: 1-D chunks for vectors, (n1, n2) over the last two dims otherwise."""
    if len(shape) == 1:
        return (chunk_size(shape[0], target),)
    return (chunk_size(shape[-2], target), chunk_size(shape[-1], target))


def index_width(totalk: int) -> int:
    """Bytes per index: the narrowest unsigned width that holds every position of a tile."""
    if totalk <= 1 << 8:
        return 1
    if totalk <= 1 << 16:
        return 2
    if totalk <= 1 << 32:
        return 4
    raise ValueError(f"a tile of {totalk} coefficients is too large to index")


@dataclass(frozen=True)
class Bucket:
    """Parameters of one shape, stacked in model order: (count, *shape), one tile plan."""

    shape: tuple[int, ...]  # of one member
    tile: tuple[int, ...]
    topk: int
    members: tuple[int, ...]  # positions in Layout.names, ascending

    @property
    def stacked_shape(self) -> tuple[int, ...]:
        return (len(self.members), *self.shape)

    @property
    def numel(self) -> int:
        return len(self.members) * math.prod(self.shape)

    @property
    def totalk(self) -> int:
        """Coefficients per tile."""
        return math.prod(self.tile)

    @property
    def num_tiles(self) -> int:
        return self.numel // self.totalk

    @property
    def index_width(self) -> int:
        return index_width(self.totalk)

    @property
    def kept(self) -> int:
        """Coefficients this bucket sends per step."""
        return self.num_tiles * self.topk

    # -- bands: the bucket as rows, cut where no tile is cut -----------------------------------
    # A bucket is processed as a (rows, row_width) matrix: its members stacked, each member's leading
    # dims folded into rows. Tiles never straddle a band of `tile[0]` rows (1-D tiles: one row of
    # `tile[0]` values), and they are numbered band after band, so any run of whole bands is a run of
    # consecutive tiles: the unit in which generate and apply work with bounded temporaries.

    @property
    def row_width(self) -> int:
        return self.shape[-1] if len(self.tile) == 2 else self.tile[0]

    @property
    def member_rows(self) -> int:
        return math.prod(self.shape) // self.row_width

    @property
    def band_rows(self) -> int:
        return self.tile[0] if len(self.tile) == 2 else 1

    @property
    def tiles_per_band(self) -> int:
        return self.row_width // self.tile[-1]

    def bands(self, max_elements: int) -> tuple[BandSlice, ...]:
        """The bucket cut into consecutive runs of whole bands of at most `max_elements` values each
        (at least one band per run)."""
        band = self.band_rows * self.row_width
        per_run = max(1, max_elements // band) * self.band_rows
        rows = len(self.members) * self.member_rows
        return tuple(
            BandSlice(self, start, min(start + per_run, rows)) for start in range(0, rows, per_run)
        )


@dataclass(frozen=True)
class BandSlice:
    """Rows [start, end) of a bucket's (rows, row_width) matrix, a whole number of bands."""

    bucket: Bucket
    start: int
    end: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.end - self.start, self.bucket.row_width)

    @property
    def tiles(self) -> slice:
        """The rows of the bucket's (num_tiles, k) tile matrices that lie in this slice."""
        b = self.bucket
        return slice(
            self.start // b.band_rows * b.tiles_per_band, self.end // b.band_rows * b.tiles_per_band
        )

    def parts(self) -> Iterator[tuple[int, int, int, int]]:
        """(member index within the bucket, first row in the member, last row + 1, first row in the
        slice) for every member the slice touches, in order."""
        rows = self.bucket.member_rows
        for j in range(self.start // rows, (self.end - 1) // rows + 1):
            lo, hi = max(self.start, j * rows), min(self.end, (j + 1) * rows)
            yield j, lo - j * rows, hi - j * rows, lo - self.start


@dataclass(frozen=True)
class Layout:
    """The tiling plan of a whole model: parameter names and shapes, grouped into buckets."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    buckets: tuple[Bucket, ...]
    transform: str

    @cached_property
    def digest(self) -> bytes:
        """sha256 of a canonical description; equal plans give equal digests."""
        h = hashlib.sha256(b"cohort.distro.layout/1")
        h.update(self.transform.encode())
        h.update(struct.pack("<I", len(self.names)))
        for name, shape in zip(self.names, self.shapes, strict=True):
            raw = name.encode()
            h.update(struct.pack("<H", len(raw)) + raw)
            h.update(struct.pack("<B", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape))
        for b in self.buckets:
            h.update(struct.pack("<B", len(b.tile)) + struct.pack(f"<{len(b.tile)}I", *b.tile))
            h.update(struct.pack("<II", b.topk, len(b.members)))
            h.update(struct.pack(f"<{len(b.members)}I", *b.members))
        return h.digest()

    @property
    def numel(self) -> int:
        return sum(b.numel for b in self.buckets)


def plan_layout(named_shapes: Iterable[tuple[str, Sequence[int]]], config: DistroConfig) -> Layout:
    """Tile every parameter and bucket equal shapes (buckets ordered by first appearance)."""
    names, shapes = [], []
    for name, shape in named_shapes:
        shape = tuple(int(d) for d in shape) or (1,)  # a scalar is a vector of one
        if any(d < 1 for d in shape):
            raise ValueError(f"parameter {name!r} has an empty shape {shape}")
        names.append(name)
        shapes.append(shape)
    if not names:
        raise ValueError("a DisTrO layout needs at least one parameter")
    members: dict[tuple[int, ...], list[int]] = {}
    for i, shape in enumerate(shapes):
        members.setdefault(shape, []).append(i)
    buckets = []
    for shape, positions in members.items():
        tile = tile_for(shape, config.compression_chunk)
        topk = min(config.compression_topk, math.prod(tile))
        buckets.append(Bucket(shape=shape, tile=tile, topk=topk, members=tuple(positions)))
    return Layout(tuple(names), tuple(shapes), tuple(buckets), config.transform)
