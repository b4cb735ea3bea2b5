"""The DisTrO optimizer of one replica: lookahead, generate (with error feedback), apply.

One training round at step t, in the overlapped pipeline (results of step t are applied at
the start of step t + 2, so the forward of step t misses this replica's step t - 1 update):

    optimizer.apply(t, results_of_step_t_minus_2)   # every replica: same bits, same weights
    optimizer.lookahead(t)                          # w -= lr(t-1) * sign(momentum)
    loss.backward()
    result = optimizer.generate(t, batch)           # undo lookahead, update momentum, compress
    payload = optimizer.codec.encode(result)        # share; keep nothing else

`generate` follows Psyche's order exactly (psyche-reference 4.5): undo the lookahead, subtract
our own previous transmission, decoupled weight decay, momentum decay, add lr * grad, DCT,
top-k. Differences, all for numerical sturdiness:
  * the momentum is fp32 whatever the parameter dtype, zero-initialised, with lr folded in;
  * the lookahead is undone bit-exactly, so replicas cannot drift apart by rounding: the step is
    added back and the few weights where w - a + a != w in floating point (~2-5% at usual rates)
    are put back from a sparse copy, instead of cloning every weight;
  * with 1-bit values the error feedback removes what peers received (see DistroConfig);
  * `apply` aggregates with a bounded mean over all results, not Psyche's scatter-mean over
    the results that picked a coefficient, so one result moves the aggregate by at most 1/N,
    and computes the direction exactly, so every replica on any hardware gets the same bits
    (see aggregate.py).

Memory: besides the weights, gradients and the fp32 momentum, every phase works on bounded slices
(`SLICE_ELEMENTS` values of a bucket at a time, `Bucket.bands`), so temporaries do not grow with the
model: no stacked copies of a bucket's parameters, no whole-model clone or direction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from .aggregate import band_directions
from .compress import SparseTiles, compress, densify, one_bit_reconstruction
from .config import DistroConfig
from .dct import decode, decode_sparse, encode, sparse_pays
from .layout import BandSlice, Bucket, Layout, plan_layout
from .result import BatchId, DistroResult, ReceivedResult
from .schedule import Schedule
from .wire import WireCodec, as_received

log = logging.getLogger(__name__)

# values of a bucket handled at once (generate, apply, lookahead): temporaries stay at a few times
# this many floats (~100-400 MB) whatever the model's size; a slice is whole tiles, so the results
# do not depend on it (apply is exact; generate's tiles are each transformed alone)
SLICE_ELEMENTS = 1 << 23


def _rows(t: torch.Tensor, width: int) -> torch.Tensor:
    return t.view(-1, width)


@dataclass
class _Lookahead:
    """How to undo a lookahead exactly: its rate, and per parameter the flat positions where adding the
    step back does not give the weight back, with the weights there."""

    eta: float
    fixes: list[tuple[torch.Tensor, torch.Tensor]]


class DistroOptimizer:
    """DisTrO for one replica over a fixed list of parameters (their order defines the layout)."""

    def __init__(
        self,
        named_parameters: Iterable[tuple[str, torch.nn.Parameter]],
        config: DistroConfig,
        lr: Schedule,
        *,
        layout: Layout | None = None,
        all_reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        """`layout`: a given tiling plan instead of the planned one (a shard's, shards.py: its tiles are
        the whole model's); `all_reduce_sum`: sums a tensor over the ranks that hold the other rows of the
        same parameters, so gradient clipping sees the whole model's norm."""
        named = [(name, p) for name, p in named_parameters if p.requires_grad]
        if not named:
            raise ValueError("DistroOptimizer needs at least one trainable parameter")
        self.config = config
        self.lr = lr
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        if layout is None:
            layout = plan_layout(((n, p.shape) for n, p in named), config)
        elif list(layout.names) != self.names or list(layout.shapes) != [
            tuple(p.shape) for p in self.params
        ]:
            raise ValueError("the layout does not describe these parameters")
        self.layout: Layout = layout
        self._all_reduce_sum = all_reduce_sum
        self.codec = WireCodec.for_config(self.layout, config)
        device = self.params[0].device
        # one fp32 momentum per bucket, the bucket's parameters stacked in model order
        self.momentum = [
            torch.zeros(b.stacked_shape, dtype=torch.float32, device=device)
            for b in self.layout.buckets
        ]
        # our previous transmission per bucket, as it is removed from the momentum (error feedback)
        self._sent: list[SparseTiles] | None = None
        # what `generate` needs to undo `lookahead` bit-exactly
        self._saved: _Lookahead | None = None

    def _members(self, bucket: Bucket) -> list[torch.nn.Parameter]:
        return [self.params[i] for i in bucket.members]

    # -- the three phases of a round -------------------------------------------------------

    @torch.no_grad()
    def lookahead(self, step: int) -> None:
        """Pre-apply our own not-yet-applied update before the forward: w -= lr(t-1) * sign(momentum)."""
        if self._saved is not None:
            raise RuntimeError("lookahead called twice without generate in between")
        if self._sent is None:
            return  # nothing generated yet: the momentum is zero
        eta = self.lr(max(step - 1, 0))
        fixes: list[tuple[torch.Tensor, torch.Tensor]] = [(_NO_FIX, _NO_FIX)] * len(self.params)
        for b, m in zip(self.layout.buckets, self.momentum, strict=True):
            for j, p in enumerate(self._members(b)):
                flat, sign = p.view(-1), m[j].view(-1)
                where, was = [], []
                for lo in range(0, flat.numel(), SLICE_ELEMENTS):
                    w, s = flat[lo : lo + SLICE_ELEMENTS], sign[lo : lo + SLICE_ELEMENTS].sign()
                    moved = w.sub(s.to(w.dtype), alpha=eta)
                    back = moved.add(s.to(w.dtype), alpha=eta)  # what the undo will compute
                    wrong = (_bits(back) != _bits(w)).nonzero().squeeze(1)
                    # int32 positions where they fit: ~5% of weights at lr 1e-3, 8 bytes each
                    where.append((wrong + lo).to(_index_dtype(flat.numel())))
                    was.append(w[wrong].clone())
                    w.copy_(moved)
                fixes[b.members[j]] = (torch.cat(where), torch.cat(was))
        self._saved = _Lookahead(eta, fixes)

    def _clip(self, max_norm: float) -> None:
        if self._all_reduce_sum is None:
            torch.nn.utils.clip_grad_norm_(self.params, max_norm)
            return
        # clip_grad_norm_'s rule over the whole model: each rank's sum of squares, summed over the ranks
        grads = [p.grad for p in self.params if p.grad is not None]
        local = torch.zeros((), dtype=torch.float32, device=self.params[0].device)
        for g in grads:
            local += g.float().pow(2).sum()
        total = self._all_reduce_sum(local).sqrt()
        coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coefficient.to(g.dtype))

    def _undo_lookahead(self) -> None:
        saved, self._saved = self._saved, None
        assert saved is not None
        for b, m in zip(self.layout.buckets, self.momentum, strict=True):
            for j, p in enumerate(self._members(b)):
                flat, sign = p.view(-1), m[j].view(-1)
                for lo in range(0, flat.numel(), SLICE_ELEMENTS):
                    w, s = flat[lo : lo + SLICE_ELEMENTS], sign[lo : lo + SLICE_ELEMENTS].sign()
                    w.add_(s.to(w.dtype), alpha=saved.eta)
                where, was = saved.fixes[b.members[j]]
                flat[where] = was

    @torch.no_grad()
    def generate(self, step: int, batch: BatchId) -> DistroResult:
        """Fold this step's gradients into the momentum and return its compressed fast part."""
        eta = self.lr(step)
        if self.config.clip_grad_norm is not None:
            self._clip(self.config.clip_grad_norm)
        if self._saved is not None:
            self._undo_lookahead()  # before anything changes the momentum whose signs it took
        transform = self.layout.transform
        decay = self.config.compression_decay
        wd = self.config.weight_decay
        kept, sent = [], []
        for i, (b, m) in enumerate(zip(self.layout.buckets, self.momentum, strict=True)):
            members = self._members(b)
            if wd:
                for p in members:
                    p.mul_(1.0 - eta * wd)
            parts = []
            for band in b.bands(SLICE_ELEMENTS):
                rows = _rows(m, b.row_width)[band.start : band.end]
                if self._sent is not None:
                    rows.sub_(self._reconstruct(self._sent[i], band))
                if decay != 1.0:
                    rows.mul_(decay)
                for j, lo, hi, at in band.parts():
                    grad = members[j].grad
                    if grad is not None:
                        rows[at : at + hi - lo].add_(_rows(grad, b.row_width)[lo:hi], alpha=eta)
                parts.append(compress(encode(rows, b.tile, transform), b.topk))
            tiles = SparseTiles(
                torch.cat([t.indices for t in parts]), torch.cat([t.values for t in parts])
            )
            kept.append(tiles)
            sent.append(self._as_removed(tiles))
        self._sent = sent
        return DistroResult(step=step, batch=batch, tiles=tuple(kept))

    @torch.no_grad()
    def apply(self, step: int, received: Sequence[ReceivedResult]) -> None:
        """Sign-SGD step with lr(step) along the aggregate of all accepted results (ours included)."""
        if self._saved is not None:
            raise RuntimeError("apply called between lookahead and generate")
        if not received:
            log.warning("step %d: no results to apply, weights unchanged", step)
            return
        eta = self.lr(step)
        device = self.params[0].device
        for band, direction in band_directions(self.layout, received, SLICE_ELEMENTS, device):
            self._step_along(band, direction, eta)

    def _reconstruct(self, tiles: SparseTiles, band: BandSlice) -> torch.Tensor:
        """IDCT of one result's sparse tiles over a band slice of its bucket, as (rows, row_width)."""
        b, rows = band.bucket, band.tiles
        indices, values = tiles.indices[rows], tiles.values[rows]
        if sparse_pays(b.topk, b.tile):
            return decode_sparse(indices, values, b.tile, band.shape, self.layout.transform)
        return decode(
            densify(SparseTiles(indices, values), b.totalk),
            b.tile,
            band.shape,
            self.layout.transform,
        )

    def _step_along(self, band: BandSlice, direction: torch.Tensor, eta: float) -> None:
        """w -= eta * direction for the rows of the bucket's parameters in `band` (direction: its rows).
        The direction is in {-1, 0, 1}, so eta * direction is exact and each weight is rounded once."""
        members = self._members(band.bucket)
        for j, lo, hi, at in band.parts():
            rows = _rows(members[j].data, band.bucket.row_width)[lo:hi]
            rows.sub_(direction[at : at + hi - lo].to(rows.dtype), alpha=eta)

    # -- state ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Momentum and last transmission (to checkpoint; a restart then needs no cold start)."""
        if self._saved is not None:
            raise RuntimeError("cannot checkpoint between lookahead and generate")
        sent = None if self._sent is None else [(t.indices, t.values) for t in self._sent]
        return {"layout": self.layout.digest, "momentum": list(self.momentum), "sent": sent}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()` output; the parameter layout must be the same."""
        if state.get("layout") != self.layout.digest:
            raise ValueError("optimizer state was saved for a different parameter layout")
        momentum = state["momentum"]
        if [tuple(m.shape) for m in momentum] != [tuple(m.shape) for m in self.momentum]:
            raise ValueError("optimizer state has momentum buffers of the wrong shapes")
        for mine, saved in zip(self.momentum, momentum, strict=True):
            mine.copy_(saved)
        sent = state["sent"]
        device = self.momentum[0].device
        self._sent = (
            None if sent is None else [SparseTiles(i.to(device), v.to(device)) for i, v in sent]
        )

    @torch.no_grad()
    def abandon_step(self) -> None:
        """A step stopped between lookahead and generate (its training was aborted): restore the weights
        the lookahead moved, so the model is exactly the applied one again; momentum is untouched."""
        if self._saved is not None:
            self._undo_lookahead()
        for p in self.params:
            p.grad = None

    def reset_momentum(self) -> None:
        """Cold start: forget the momentum and our last transmission."""
        for m in self.momentum:
            m.zero_()
        self._sent = None

    def _as_removed(self, tiles: SparseTiles) -> SparseTiles:
        """The part of the kept coefficients that counts as delivered (error feedback).

        Peers bound each result per tile (aggregate.bounded_values: divided by the tile's max
        |value|) before averaging. That is a positive scale per tile: it keeps the direction of
        what we sent within the tile and drops only its size, which the sign-SGD step drops
        anyway. So what counts as delivered stays what the wire carried, in momentum units
        (lr * gradient): the wire-rounded values, or for 1-bit the best momentum-unit reading
        of the +-1 code (its bound is a no-op). Removing the bounded values instead would
        subtract O(1) numbers from an O(lr) momentum. The 1/N weight peers give our result is
        the data-parallel mean's (each worker's gradient counts 1/N in an all-reduce); error
        feedback there, too, removes the whole compressed vector from the local residual."""
        if self.config.quantize_1bit:
            if self.config.error_feedback == "received":
                return one_bit_reconstruction(tiles)
            return tiles
        return as_received(tiles, self.codec.kind)


_NO_FIX = torch.zeros(0, dtype=torch.int64)


def _index_dtype(numel: int) -> torch.dtype:
    return torch.int32 if numel < 1 << 31 else torch.int64


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor (so -0.0 and 0.0 differ, as they do in a digest)."""
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[t.element_size()])
