"""DisTrO over one rank's rows of every parameter: the arithmetic of a member that spans processes.

A member of N ranks (torch.distributed; FSDP2 shards every parameter along dim 0 as `torch.chunk` does)
holds on each rank a run of rows of every parameter. Where those runs are whole tile bands
(`plan_shard` refuses a split that cuts a tile), each rank runs DisTrO on its rows with the whole model's
tiles, in a `DistroOptimizer` over its local tensors and the plan's `local` layout: its lookahead, generate
and apply are the one-process replica's on those rows (gradient clipping sums the norm over the ranks).
A step's result is the ranks' tiles put back in the model's order (`assemble`, on the rank that speaks for
the member); an apply hands each rank the tiles of its rows (`local_results`), and since the apply is exact
arithmetic (aggregate.py) every rank's rows come out with the very bits a one-process replica computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .compress import SparseTiles
from .layout import Bucket, Layout
from .result import DistroResult, ReceivedResult


def dim0_chunk(size: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) of dim 0 that `rank` holds when `size` rows are cut into `world` chunks as
    `torch.chunk` (and FSDP2's dim-0 sharding) cuts them: ceil(size / world) each, the last ones shorter."""
    per = -(-size // world)
    start = min(rank * per, size)
    return start, min(start + per, size)


@dataclass(frozen=True)
class ShardPlan:
    """One rank's part of a model's DisTrO layout."""

    rank: int
    world: int
    model: Layout  # the whole model's plan: the codec's, the payload's
    local: Layout  # this rank's rows: same buckets, members and tiles; shorter shapes
    dim0: tuple[tuple[int, int], ...]  # per parameter (model order), the dim-0 rows held
    first_tile: tuple[
        int, ...
    ]  # per bucket, the first tile of a member's tiles that this rank holds

    def local_tensor(self, index: int, full: torch.Tensor) -> torch.Tensor:
        """This rank's rows of parameter `index` of a whole-model tensor (a view)."""
        start, end = self.dim0[index]
        return full[start:end]


def plan_shard(model: Layout, rank: int, world: int) -> ShardPlan:
    """The rows of every parameter `rank` of `world` holds, and the layout DisTrO runs on there; a
    ValueError names a parameter whose chunk would cut a tile or hold nothing."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not one of {world}")
    dim0 = [dim0_chunk(shape[0], rank, world) for shape in model.shapes]
    local_shapes = [
        (end - start, *shape[1:]) for (start, end), shape in zip(dim0, model.shapes, strict=True)
    ]
    buckets, first_tile = [], []
    for b in model.buckets:
        start, end = dim0[b.members[0]]
        per_row = math.prod(b.shape[1:])  # values in one dim-0 row
        band = b.band_rows * b.row_width  # values in one band of tiles
        for edge in (start, end):
            if edge * per_row % band and edge != b.shape[0]:
                raise ValueError(
                    f"{model.names[b.members[0]]} {b.shape}: a chunk over {world} ranks ends at row {edge}, "
                    f"inside a band of {b.tile} tiles"
                )
        if end == start:
            raise ValueError(
                f"{model.names[b.members[0]]} {b.shape} has too few rows for {world} ranks"
            )
        buckets.append(
            Bucket(shape=local_shapes[b.members[0]], tile=b.tile, topk=b.topk, members=b.members)
        )
        first_tile.append(start * per_row // band * b.tiles_per_band)
    local = Layout(model.names, tuple(local_shapes), tuple(buckets), model.transform)
    return ShardPlan(rank, world, model, local, tuple(dim0), tuple(first_tile))


def _member_tiles(bucket: Bucket) -> int:
    return bucket.num_tiles // len(bucket.members)


def assemble(plans: Sequence[ShardPlan], parts: Sequence[DistroResult]) -> DistroResult:
    """The whole model's result from every rank's (in rank order): per bucket and member, the ranks'
    tiles one after the other, as a one-process replica numbers them."""
    if [p.rank for p in plans] != list(range(len(parts))):
        raise ValueError("need every rank's plan and result, in rank order")
    tiles = []
    for i, b in enumerate(plans[0].model.buckets):
        pieces = []
        for j in range(len(b.members)):
            for plan, part in zip(plans, parts, strict=True):
                t = _member_tiles(plan.local.buckets[i])
                pieces.append(
                    (
                        part.tiles[i].indices[j * t : (j + 1) * t],
                        part.tiles[i].values[j * t : (j + 1) * t],
                    )
                )
        tiles.append(
            SparseTiles(torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces]))
        )
    first = parts[0]
    return DistroResult(first.step, first.batch, tuple(tiles), first.state)


def local_tiles(plan: ShardPlan, tiles: Sequence[SparseTiles]) -> tuple[SparseTiles, ...]:
    """The tiles of this rank's rows, from the whole model's (per bucket, in the model's tile order)."""
    out = []
    for i, b in enumerate(plan.model.buckets):
        whole, mine = _member_tiles(b), _member_tiles(plan.local.buckets[i])
        rows = torch.cat([
            torch.arange(j * whole + plan.first_tile[i], j * whole + plan.first_tile[i] + mine)
            for j in range(len(b.members))
        ])  # fmt: skip
        out.append(SparseTiles(tiles[i].indices[rows], tiles[i].values[rows]))
    return tuple(out)


def local_results(plan: ShardPlan, received: Sequence[ReceivedResult]) -> list[ReceivedResult]:
    """Each result's tiles of this rank's rows (its commitment kept: the apply orders by it)."""
    out = []
    for r in received:
        result = DistroResult(
            r.result.step, r.result.batch, local_tiles(plan, r.result.tiles), r.result.state
        )
        out.append(ReceivedResult(result, r.commitment))
    return out
