"""How far a trainer's published payload and supplied state are from a replay, and the verdict.

Honest replays differ from the original only by the rounding of one step's gradient (other
hardware, thread counts, kernels, micro-batches): a few near-tied top-k picks change, the
momentum moves by about lr * |rounding of the gradient|. Every cheating mode measured in
benchmarks/integrity/verifier_study.py is orders of magnitude further away. The thresholds
below sit between the two; the README lists the measurements behind them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from ..distro import BatchId, DistroConfig, Layout, SparseTiles, WireCodec
from ..distro.compress import densify
from ..distro.dct import decode, decode_sparse, sparse_pays
from ..distro.layout import BandSlice
from .sample import Sample, SampledState

# Measured by benchmarks/integrity/verifier_study.py (tiny Llama, 4 replicas, 1-bit and bf16
# payloads; verify/README.md has the tables). Honest replays in fp32 under 1 thread instead of
# 2 (bit-exact), 2 micro-batches instead of 1, eager attention instead of SDPA: index and sign
# agreement 1.0, momentum error <= 7e-7, sent and value error <= 1.3e-3. A replay under bf16
# autocast, far coarser than fp32 hardware differ by, as the stress case the tolerances must
# pass: index agreement >= 0.969, momentum error <= 0.040, sent error <= 0.24, value error
# <= 0.14. The closest cheater (1 of its 8 sequences swapped for its own text): index agreement
# <= 0.965, momentum error >= 0.097; sign flips: sign agreement <= 0.02; lazy modes: momentum
# error >= 1.6. The momentum check carries the margin; the others catch what it cannot see.
MIN_INDEX_AGREEMENT = 0.95  # fraction of the published picks that the replay also picks
MIN_SIGN_AGREEMENT = 0.98  # on the shared picks, the fraction of equal signs
MAX_VALUE_ERROR = 0.35  # fp payloads: relative L2 distance of the kept values (dense)
MAX_MOMENTUM_ERROR = 0.06  # supplied vs replayed momentum, relative to what the step added
MAX_SENT_ERROR = 0.35  # supplied vs replayed last transmission (error feedback), relative L2

COMPARE_VALUES = 1 << 22  # momentum values compared at once (bounded temporaries)


@dataclass(frozen=True)
class Thresholds:
    min_index_agreement: float = MIN_INDEX_AGREEMENT
    min_sign_agreement: float = MIN_SIGN_AGREEMENT
    max_value_error: float = MAX_VALUE_ERROR
    max_momentum_error: float = MAX_MOMENTUM_ERROR
    max_sent_error: float = MAX_SENT_ERROR


@dataclass(frozen=True)
class PayloadAgreement:
    header_ok: bool  # the published header names the checked step and batch
    index_agreement: float
    sign_agreement: float
    value_error: float  # relative L2 of the dense kept values (for 1-bit: of the +-1 signs)


@dataclass(frozen=True)
class StateAgreement:
    momentum_error: float  # |supplied - replayed| / |what the step added| (lr * gradient)
    sent_error: float  # |supplied - replayed| / |replayed| of the dense last transmission


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str  # one line
    metrics: dict[str, float] = field(default_factory=dict)


def _picks(tiles: SparseTiles, totalk: int) -> torch.Tensor:
    return densify(SparseTiles(tiles.indices, torch.ones_like(tiles.values)), totalk).bool()


def _relative(diff_sq: float, ref_sq: float) -> float:
    if ref_sq == 0.0:
        return 0.0 if diff_sq == 0.0 else math.inf
    return math.sqrt(diff_sq / ref_sq)


def _tile_runs(layout: Layout, samples: Sequence[Sample] | None) -> Iterator[tuple[int, slice]]:
    """(bucket, tile rows) to compare: the samples' tiles, or every tile in bounded runs."""
    if samples is not None:
        for s in samples:
            yield s.bucket, s.band.tiles
        return
    for i, b in enumerate(layout.buckets):
        rows = max(1, COMPARE_VALUES // b.totalk)  # tiles densified at once (bounded temporaries)
        for lo in range(0, b.num_tiles, rows):
            yield i, slice(lo, min(lo + rows, b.num_tiles))


def tiles_agreement(
    codec: WireCodec,
    published: tuple[SparseTiles, ...],
    replayed: tuple[SparseTiles, ...],
    samples: Sequence[Sample] | None = None,
) -> tuple[float, float, float]:
    """(index agreement, sign agreement on shared picks, relative L2 of the dense values), over the
    sampled tiles (all of them without `samples`)."""
    kept = shared = same_sign = 0
    diff_sq = ref_sq = 0.0
    for i, part in _tile_runs(codec.layout, samples):
        b = codec.layout.buckets[i]
        p = SparseTiles(published[i].indices[part], published[i].values[part])
        r = SparseTiles(replayed[i].indices[part], replayed[i].values[part])
        kept += p.indices.numel()
        ref_sq += _sq(r.values)
        both = _picks(p, b.totalk) & _picks(r, b.totalk)
        dp, dr = densify(p, b.totalk), densify(r, b.totalk)
        shared += int(both.sum())
        same_sign += int((dp.sign() == dr.sign())[both].sum())
        diff_sq += _sq(dp - dr)
    sign = same_sign / shared if shared else 0.0
    return (shared / kept if kept else 0.0), sign, _relative(diff_sq, ref_sq)


def compare_payloads(
    codec: WireCodec,
    published: bytes,
    replayed: bytes,
    step: int,
    batch: BatchId,
    samples: Sequence[Sample] | None = None,
) -> PayloadAgreement:
    """Decode both payloads with the run's codec and measure how far apart they are (on the sampled tiles)."""
    pub, rep = codec.decode(published).result, codec.decode(replayed).result
    index, sign, value = tiles_agreement(codec, pub.tiles, rep.tiles, samples)
    header_ok = pub.step == step and pub.batch == batch
    return PayloadAgreement(header_ok, index, sign, value)


def _sq(x: torch.Tensor) -> float:
    """Sum of squares, accumulated in float64."""
    return float(x.pow(2).sum(dtype=torch.float64))


def _carried_rows(rows: torch.Tensor, sent: SparseTiles | None, band: BandSlice, layout: Layout,
                  config: DistroConfig) -> torch.Tensor:  # fmt: skip
    """What `generate` makes of a band's earlier momentum `rows` before adding this step's gradient:
    decay * (momentum - IDCT(last transmission))."""
    b = band.bucket
    if sent is not None:
        plan = (b.tile, band.shape, layout.transform)
        if sparse_pays(b.topk, b.tile):
            rows = rows - decode_sparse(sent.indices, sent.values, *plan)
        else:
            rows = rows - decode(densify(sent, b.totalk), *plan)
    return rows * config.compression_decay


def compare_states(
    supplied: SampledState,
    replayed: SampledState,
    before: SampledState,
    layout: Layout,
    config: DistroConfig,
    samples: Sequence[Sample],
) -> StateAgreement:
    """Distance of the supplied state after the step from the replayed one on the sampled bands: the momentum
    relative to what the step itself added to it (lr * gradient, so the measure does not shrink as the
    momentum grows over a run), the last transmission relative to its own size."""
    diff_sq = ref_sq = 0.0
    for k, s in enumerate(samples):
        b, band = layout.buckets[s.bucket], s.band
        r = replayed.momentum[k]
        diff_sq += _sq(supplied.momentum[k] - r)  # exact for nearby values (Sterbenz)
        earlier = None if before.sent is None else before.sent[k]
        ref_sq += _sq(r - _carried_rows(before.momentum[k], earlier, band, layout, config))
    momentum = _relative(diff_sq, ref_sq)
    if supplied.sent is None or replayed.sent is None:
        sent = 0.0 if supplied.sent is None and replayed.sent is None else math.inf
    else:
        diff_sq = ref_sq = 0.0
        for k, s in enumerate(samples):
            b, pr = layout.buckets[s.bucket], replayed.sent[k]
            diff_sq += _sq(densify(supplied.sent[k], b.totalk) - densify(pr, b.totalk))
            ref_sq += _sq(pr.values)
        sent = _relative(diff_sq, ref_sq)
    return StateAgreement(momentum, sent)


def exactly_equal(supplied: SampledState, replayed: SampledState) -> bool:
    """The supplied state equals the replayed one bit for bit on the sampled bands."""
    if (supplied.sent is None) != (replayed.sent is None):
        return False
    if not all(
        torch.equal(a, b) for a, b in zip(supplied.momentum, replayed.momentum, strict=True)
    ):
        return False
    return (
        supplied.sent is None
        or replayed.sent is None
        or all(
            torch.equal(a.indices, b.indices) and torch.equal(a.values, b.values)
            for a, b in zip(supplied.sent, replayed.sent, strict=True)
        )
    )


def judge(
    payload: PayloadAgreement,
    state: StateAgreement,
    one_bit: bool,
    thresholds: Thresholds | None = None,
) -> Verdict:
    """Pass only if the payload and the supplied state are both within the honest tolerances."""
    t = thresholds or Thresholds()
    metrics = {
        "index_agreement": payload.index_agreement,
        "sign_agreement": payload.sign_agreement,
        "value_error": payload.value_error,
        "momentum_error": state.momentum_error,
        "sent_error": state.sent_error,
    }
    checks = [
        (payload.header_ok, "the payload's header names another step or batch"),
        (
            payload.index_agreement >= t.min_index_agreement,
            f"the payload keeps {payload.index_agreement:.1%} of the replay's coefficients "
            f"(honest: >= {t.min_index_agreement:.0%})",
        ),
        (
            payload.sign_agreement >= t.min_sign_agreement,
            f"signs agree with the replay on {payload.sign_agreement:.1%} of shared coefficients "
            f"(honest: >= {t.min_sign_agreement:.0%})",
        ),
        (
            one_bit or payload.value_error <= t.max_value_error,
            f"kept values are {payload.value_error:.3g} (relative L2) from the replay's "
            f"(honest: <= {t.max_value_error:g})",
        ),
        (
            state.momentum_error <= t.max_momentum_error,
            f"the supplied momentum is {state.momentum_error:.3g} (relative L2) from the replay's "
            f"(honest: <= {t.max_momentum_error:g})",
        ),
        (
            state.sent_error <= t.max_sent_error,
            f"the supplied error-feedback state is {state.sent_error:.3g} (relative L2) from the "
            f"replay's (honest: <= {t.max_sent_error:g})",
        ),
    ]
    for ok, reason in checks:
        if not ok:
            return Verdict(False, reason, metrics)
    return Verdict(True, "the step recomputes within the honest tolerances", metrics)
