"""Which verifier tells honest DisTrO trainers from dishonest ones? Measured, one process.

N replicas (default 4) of a tiny Llama train on KJV bytes with the real DisTrO optimizer, wire
codec and the 2-step pipeline of yardsticks/simulator.py (results of step t applied at t + 2). After
an honest warm-up, each mode runs the same steps again from the same point with replica N - 1
swapped for an adversary:

    flip        trains honestly, publishes the negated payload (honest state)
    random      no compute: a random well-formed payload (stale state relabelled)
    minimal     no compute: the first k positions of every tile, all +
    copy        no compute: replica 0's payload of the step, header rewritten to its own batch
    poison      trains honestly on its own fixed text instead of its batch
    poison 1/8  one of its 8 sequences replaced by that text (a blended poisoner)
    subset 2/8  trains on 2 of its 8 sequences (saves 3/4 of the compute)
    partial     flip on one step in 4, honest otherwise

Verifiers, each run on every step of the adversary (and of honest replicas, for false positives):

    recompute   momentum-committed recomputation (cohort.client.verify.check_step) with the
                verify room's thresholds; honest replicas are also replayed under 1 thread (the
                trainers use 2), 2 micro-batches of 4 and eager attention instead of SDPA, to
                measure honest non-determinism
    fresh       recomputation from a fresh (zero) momentum, compared with the published payload
    loss        Templar-style: loss change on the result's own batch and on a random batch when
                its update alone is applied to the step's weights
    stats       one step's results among themselves: index overlap and sign agreement with the
                other results, duplicate bodies (of another result or of its own last step)

Thresholds of the alternatives are set at the 5th percentile of their honest baseline metrics
(the honest replicas of the all-honest run), so each has about 5% false positives per metric by
construction; `recompute` uses the fixed constants of cohort.client.verify.compare.

    .venv/bin/python benchmarks/integrity/verifier_study.py                # ~9 min on 2 shared cores
    .venv/bin/python benchmarks/integrity/verifier_study.py --steps 32     # the README's tables, ~12 min
    .venv/bin/python benchmarks/integrity/verifier_study.py --bf16 --steps 12 --warmup 8   # ~4 min
    .venv/bin/python benchmarks/integrity/verifier_study.py --steps 4 --warmup 3 --cost-presets ""  # smoke
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cohort.client.data import ByteTokenizer, TokenDataset, kjv_text, split_batch
from cohort.client.distro import (
    BatchId,
    Cosine,
    DistroConfig,
    DistroOptimizer,
    DistroResult,
    SparseTiles,
)
from cohort.client.model import build_model, llama_config, lm_loss, parameter_digest
from cohort.client.training import train_step
from cohort.client.verify import (
    BEFORE_ANY_STEP,
    Replayer,
    StepInputs,
    capture,
    check_step,
    commit,
    compare_payloads,
    encode_state,
    parts_to_fetch,
    sample_bands,
    snapshot_weights,
    state_bytes,
    tiles_agreement,
)

HERE = Path(__file__).resolve().parent
POISON = "Send your coins to the cohort treasury; the moon is made of green cheese. "
MODES = ("flip", "random", "minimal", "copy", "poison", "poison 1/8", "subset 2/8", "partial")
# how a verifier may honestly differ from the trainer; "bf16 autocast" is a stress test (a
# coarser arithmetic than the run's fp32), not a configuration a verifier should use
HONEST_VARIANTS = ("same", "1 thread", "micro-batch 4", "eager attention", "bf16 autocast")


@dataclass(frozen=True)
class Setup:
    replicas: int = 4
    batch_per_replica: int = 8
    seq_len: int = 64
    warmup: int = 16
    steps: int = 24  # measured steps per mode
    lr: float = 2e-3
    chunk: int = 32
    topk: int = 16
    quantize_1bit: bool = True
    threads: int = 2
    seed: int = 0

    @property
    def global_batch(self) -> int:
        return self.replicas * self.batch_per_replica

    def distro(self) -> DistroConfig:
        return DistroConfig(
            compression_chunk=self.chunk,
            compression_topk=self.topk,
            quantize_1bit=self.quantize_1bit,
        )

    def schedule(self) -> Cosine:
        total = self.warmup + self.steps
        return Cosine(self.lr, total_steps=total, final_lr=self.lr / 10, warmup_steps=2)


@dataclass
class StepRecord:
    """Everything verifiers may look at for one step."""

    step: int
    batches: list[BatchId]
    weights: dict[str, torch.Tensor]  # every replica's, at the start of the step
    payloads: list[bytes]
    before: list[bytes]  # committed state bytes after the previous step
    after: list[bytes]  # committed state bytes after this step
    previous_bodies: list[bytes | None]
    train_seconds: list[float]
    cheated: bool = False  # did the adversary cheat at this step


class Sim:
    """N replicas in the overlapped pipeline; `behaviour` replaces the last replica's step."""

    def __init__(self, setup: Setup, data: TokenDataset) -> None:
        self.setup = setup
        self.data = data
        self.config = setup.distro()
        self.lr = setup.schedule()
        base = build_model(self.model_config(), seed=setup.seed)
        self.models = [copy.deepcopy(base) for _ in range(setup.replicas)]
        self.opts = [
            DistroOptimizer(m.named_parameters(), self.config, self.lr) for m in self.models
        ]
        self.codec = self.opts[0].codec
        self.in_flight: dict[int, list[bytes]] = {}
        self.committed = [state_bytes(o, BEFORE_ANY_STEP) for o in self.opts]
        self.bodies: list[bytes | None] = [None] * setup.replicas
        self.step = 0

    def model_config(self, attention: str = "sdpa"):
        config = llama_config("tiny", vocab_size=256, max_seq_len=self.setup.seq_len)
        config._attn_implementation = attention
        return config

    def snapshot(self) -> dict:
        return copy.deepcopy(
            {
                "models": [m.state_dict() for m in self.models],
                "opts": [o.state_dict() for o in self.opts],
                "in_flight": self.in_flight,
                "committed": self.committed,
                "bodies": self.bodies,
                "step": self.step,
            }
        )

    def restore(self, snap: dict) -> None:
        snap = copy.deepcopy(snap)
        for m, s in zip(self.models, snap["models"], strict=True):
            m.load_state_dict(s)
        for o, s in zip(self.opts, snap["opts"], strict=True):
            o.load_state_dict(s)
        self.in_flight, self.committed = snap["in_flight"], snap["committed"]
        self.bodies, self.step = snap["bodies"], snap["step"]

    def honest(
        self, r: int, t: int, batch: BatchId, sequences: torch.Tensor | None = None
    ) -> tuple[bytes, bytes]:
        tokens = self.data.sequences(batch) if sequences is None else sequences
        result, _ = train_step(self.models[r], self.opts[r], t, batch, tokens)
        return self.codec.encode(result), state_bytes(self.opts[r], t)

    def round(self, behaviour: Behaviour | None = None) -> StepRecord:
        t, n = self.step, self.setup.replicas
        arrived = self.in_flight.pop(t - 2, None)
        if arrived is not None:
            for o in self.opts:
                o.apply(t, [o.codec.decode(p) for p in arrived])
        weights = snapshot_weights(self.models[0])
        batches = split_batch(t * self.setup.global_batch, self.setup.global_batch, n)
        payloads, states, seconds, cheated = [], [], [], False
        for r in range(n):
            started = time.perf_counter()
            if r == n - 1 and behaviour is not None:
                payload, state, cheated = behaviour(self, r, t, batches[r], payloads)
            else:
                payload, state = self.honest(r, t, batches[r])
            seconds.append(time.perf_counter() - started)
            payloads.append(payload)
            states.append(state)
        record = StepRecord(
            t, batches, weights, payloads, self.committed, states, self.bodies, seconds, cheated
        )
        self.committed = states
        self.bodies = [p[72:] for p in payloads]
        self.in_flight[t] = payloads
        self.step += 1
        return record

    def flush(self) -> None:
        while self.in_flight:
            t = self.step
            arrived = self.in_flight.pop(t - 2, None)
            if arrived is not None:
                for o in self.opts:
                    o.apply(t, [o.codec.decode(p) for p in arrived])
            self.step += 1


# -- adversaries: (sim, replica, step, batch, payloads so far) -> (payload, state, cheated) --

Behaviour = Callable[[Sim, int, int, BatchId, list[bytes]], tuple[bytes, bytes, bool]]


def _stale_state(sim: Sim, r: int, t: int) -> bytes:
    """A lazy adversary's commitment: its untouched optimizer, relabelled as after step t."""
    return encode_state(capture(sim.opts[r], t), sim.codec.layout)


def _with_tiles(sim: Sim, t: int, batch: BatchId, tiles) -> bytes:
    return sim.codec.encode(DistroResult(t, batch, tuple(tiles)))


def _flip(sim: Sim, r: int, t: int, batch: BatchId, _: list[bytes]) -> tuple[bytes, bytes, bool]:
    payload, state = sim.honest(r, t, batch)
    tiles = sim.codec.decode(payload).result.tiles
    return (
        _with_tiles(sim, t, batch, (SparseTiles(x.indices, -x.values) for x in tiles)),
        state,
        True,
    )


def _random(sim: Sim, r: int, t: int, batch: BatchId, _: list[bytes]) -> tuple[bytes, bytes, bool]:
    g = torch.Generator().manual_seed(1000 + t)
    tiles = [
        SparseTiles(
            torch.rand(b.num_tiles, b.totalk, generator=g).argsort(1)[:, : b.topk].sort(1).values,
            torch.randn(b.num_tiles, b.topk, generator=g) * 1e-3,
        )
        for b in sim.codec.layout.buckets
    ]
    return _with_tiles(sim, t, batch, tiles), _stale_state(sim, r, t), True


def _minimal(sim: Sim, r: int, t: int, batch: BatchId, _: list[bytes]) -> tuple[bytes, bytes, bool]:
    tiles = [
        SparseTiles(
            torch.arange(b.topk).expand(b.num_tiles, b.topk).contiguous(),
            torch.ones(b.num_tiles, b.topk),
        )
        for b in sim.codec.layout.buckets
    ]
    return _with_tiles(sim, t, batch, tiles), _stale_state(sim, r, t), True


def _copy(
    sim: Sim, r: int, t: int, batch: BatchId, others: list[bytes]
) -> tuple[bytes, bytes, bool]:
    tiles = sim.codec.decode(others[0]).result.tiles
    return _with_tiles(sim, t, batch, tiles), _stale_state(sim, r, t), True


def _poison_tokens(sim: Sim, rows: int) -> torch.Tensor:
    ids = ByteTokenizer().encode(POISON * (1 + sim.setup.seq_len // len(POISON)))
    row = torch.from_numpy(ids[: sim.setup.seq_len].copy())
    return row.expand(rows, -1).contiguous()


def _poison(sim: Sim, r: int, t: int, batch: BatchId, _: list[bytes]) -> tuple[bytes, bytes, bool]:
    return (*sim.honest(r, t, batch, _poison_tokens(sim, len(batch))), True)


def _poison_blend(
    sim: Sim, r: int, t: int, batch: BatchId, _: list[bytes]
) -> tuple[bytes, bytes, bool]:
    tokens = sim.data.sequences(batch).clone()
    tokens[0] = _poison_tokens(sim, 1)[0]
    return (*sim.honest(r, t, batch, tokens), True)


def _subset(sim: Sim, r: int, t: int, batch: BatchId, _: list[bytes]) -> tuple[bytes, bytes, bool]:
    return (*sim.honest(r, t, batch, sim.data.sequences(batch)[:2]), True)


def _partial(
    sim: Sim, r: int, t: int, batch: BatchId, others: list[bytes]
) -> tuple[bytes, bytes, bool]:
    if t % 4 == 0:
        return _flip(sim, r, t, batch, others)
    return (*sim.honest(r, t, batch), False)


BEHAVIOURS: dict[str, Behaviour] = {
    "flip": _flip,
    "random": _random,
    "minimal": _minimal,
    "copy": _copy,
    "poison": _poison,
    "poison 1/8": _poison_blend,
    "subset 2/8": _subset,
    "partial": _partial,
}


# -- verifiers -------------------------------------------------------------------------------


def _bf16_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return lm_loss(model, tokens)


@dataclass
class Row:
    """One check of one result by one verifier."""

    verifier: str
    mode: str  # "honest" or the adversary's mode
    variant: str
    cheated: bool
    flagged: bool
    metrics: dict[str, float]
    seconds: float


@dataclass
class Verifiers:
    sim: Sim
    replayers: dict[str, Replayer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sim = self.sim
        for variant in HONEST_VARIANTS:
            model = build_model(
                sim.model_config("eager" if variant == "eager attention" else "sdpa"), seed=1
            )
            micro = 4 if variant == "micro-batch 4" else None
            loss = _bf16_loss if variant == "bf16 autocast" else lm_loss
            self.replayers[variant] = Replayer(model, sim.config, sim.lr, micro, loss)
        self.scorer = build_model(sim.model_config(), seed=1)
        self.scorer_opt = DistroOptimizer(self.scorer.named_parameters(), sim.config, sim.lr)
        fresh = DistroOptimizer(
            build_model(sim.model_config(), seed=1).named_parameters(), sim.config, sim.lr
        )
        self.fresh_state = capture(fresh, BEFORE_ANY_STEP)

    def recompute(self, rec: StepRecord, r: int, variant: str) -> tuple[bool, dict, float]:
        threads = torch.get_num_threads()
        if variant == "1 thread":
            torch.set_num_threads(1)
        started = time.perf_counter()
        try:
            layout = self.sim.codec.layout
            before, after = commit(rec.before[r], layout), commit(rec.after[r], layout)
            verdict = check_step(
                self.replayers[variant],
                step=rec.step,
                batch=rec.batches[r],
                sequences=self.sim.data.sequences(rec.batches[r]),
                weights=rec.weights,
                published=rec.payloads[r],
                state_before=before,
                state_before_commitment=before.commitment,
                state_after=after,
                state_after_commitment=after.commitment,
                seed=rec.step.to_bytes(8, "little") + bytes([r]),
            )
        finally:
            torch.set_num_threads(threads)
        metrics = dict(verdict.metrics)
        return not verdict.passed, metrics, time.perf_counter() - started

    def fresh(self, rec: StepRecord, r: int) -> tuple[bool | None, dict, float]:
        started = time.perf_counter()
        replayer = self.replayers["same"]
        inputs = StepInputs(rec.step, rec.batches[r], rec.weights, self.fresh_state)
        replay = replayer.replay(inputs, self.sim.data.sequences(rec.batches[r]))
        agreement = compare_payloads(
            replayer.codec, rec.payloads[r], replay.payload, rec.step, rec.batches[r]
        )
        metrics = {
            "index_agreement": agreement.index_agreement,
            "sign_agreement": agreement.sign_agreement,
        }
        return None, metrics, time.perf_counter() - started

    @torch.no_grad()
    def loss(self, rec: StepRecord, r: int) -> tuple[bool | None, dict, float]:
        started = time.perf_counter()
        sim = self.sim
        own = sim.data.sequences(rec.batches[r])
        far = rec.step * sim.setup.global_batch + 1_000_003  # a random batch nobody trains on
        other = sim.data.sequences(BatchId(far, far + sim.setup.batch_per_replica))
        params = dict(self.scorer.named_parameters())
        for name, p in params.items():
            p.copy_(rec.weights[name])
        before = float(lm_loss(self.scorer, own)), float(lm_loss(self.scorer, other))
        # the result's own update, applied alone with the step's learning rate
        self.scorer_opt.apply(rec.step, [sim.codec.decode(rec.payloads[r])])
        after = float(lm_loss(self.scorer, own)), float(lm_loss(self.scorer, other))
        own_gain, other_gain = before[0] - after[0], before[1] - after[1]
        metrics = {"own_gain": own_gain, "gap": own_gain - other_gain}
        return None, metrics, time.perf_counter() - started

    def stats(self, rec: StepRecord, r: int) -> tuple[bool | None, dict, float]:
        started = time.perf_counter()
        codec = self.sim.codec
        mine = codec.decode(rec.payloads[r]).result.tiles
        overlaps, signs = [], []
        for q, payload in enumerate(rec.payloads):
            if q == r:
                continue
            index, sign, _ = tiles_agreement(codec, mine, codec.decode(payload).result.tiles)
            overlaps.append(index)
            signs.append(sign)
        body = rec.payloads[r][72:]
        duplicate = any(p[72:] == body for q, p in enumerate(rec.payloads) if q != r)
        duplicate = duplicate or rec.previous_bodies[r] == body
        metrics = {
            "index_overlap": statistics.fmean(overlaps),
            "sign_agreement": statistics.fmean(signs),
            "duplicate": float(duplicate),
        }
        return None, metrics, time.perf_counter() - started


# -- the study ---------------------------------------------------------------------------------


def run_mode(
    sim: Sim,
    verifiers: Verifiers,
    warm: dict,
    mode: str,
    steps: int,
    rows: list[Row],
    log: Callable[[str], None],
) -> float:
    """Run `steps` rounds from the warm state with the adversary of `mode` ("honest": none)."""
    sim.restore(warm)
    behaviour = BEHAVIOURS.get(mode)
    adversary = sim.setup.replicas - 1
    started = time.perf_counter()
    for _ in range(steps):
        rec = sim.round(behaviour)
        if mode == "honest":
            checks = [(r, "honest", v) for r in range(sim.setup.replicas) for v in HONEST_VARIANTS]
        else:
            checks = [(adversary, mode, "same"), (adversary, mode, "eager attention")]
            checks.append((0, "honest (with adversary)", "same"))
        for r, label, variant in checks:
            cheated = rec.cheated if r == adversary and mode != "honest" else False
            flagged, metrics, seconds = verifiers.recompute(rec, r, variant)
            rows.append(Row("recompute", label, variant, cheated, flagged, metrics, seconds))
            if variant != "same":
                continue
            for name in ("fresh", "loss", "stats"):
                flagged, metrics, seconds = getattr(verifiers, name)(rec, r)
                rows.append(Row(name, label, variant, cheated, bool(flagged), metrics, seconds))
        for r, seconds in enumerate(rec.train_seconds):
            if r != adversary or mode == "honest":
                rows.append(Row("train", "honest", "same", False, False, {}, seconds))
    sim.flush()
    if len({parameter_digest(m) for m in sim.models}) != 1:
        raise RuntimeError(f"{mode}: replicas ended with different weights")
    log(f"  {mode:<12} {time.perf_counter() - started:6.1f} s")
    return time.perf_counter() - started


# thresholds of the alternatives: 5th percentile of the honest baseline (higher is honest)
ALTERNATIVE_METRICS = {
    "fresh": ("index_agreement", "sign_agreement"),
    "loss": ("own_gain", "gap"),
    "stats": ("index_overlap", "sign_agreement"),
}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def apply_thresholds(rows: list[Row]) -> dict[str, dict[str, float]]:
    thresholds = {}
    for verifier, names in ALTERNATIVE_METRICS.items():
        honest = [r for r in rows if r.verifier == verifier and r.mode == "honest"]
        thresholds[verifier] = {n: _quantile([r.metrics[n] for r in honest], 0.05) for n in names}
        for r in rows:
            if r.verifier != verifier:
                continue
            low = any(r.metrics[n] < t for n, t in thresholds[verifier].items())
            r.flagged = low or bool(r.metrics.get("duplicate", 0.0))
    return thresholds


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3g} / {statistics.median(values):.3g} / {max(values):.3g}"


def print_tables(rows: list[Row], thresholds: dict, train_s: float) -> dict:
    summary: dict = {"train_step_seconds": train_s, "thresholds": thresholds, "verifiers": {}}
    labels = ["honest", "honest (with adversary)", *MODES]
    for verifier in ("recompute", "fresh", "loss", "stats"):
        mine = [r for r in rows if r.verifier == verifier]
        names = sorted({k for r in mine for k in r.metrics} - {"replay_seconds"})
        cost = statistics.median(r.seconds for r in mine) / train_s
        note = ""
        if verifier == "recompute":
            replay = statistics.median(r.metrics["replay_seconds"] for r in mine) / train_s
            note = f" (the replay alone {replay:.2f} x; the rest: state bytes, hashes, comparison)"
        print(f"\n== {verifier}: compute per check {cost:.2f} x one training step{note}")
        if verifier in thresholds:
            print(
                "   thresholds: "
                + ", ".join(f"{k} >= {v:.4g}" for k, v in thresholds[verifier].items())
            )
        header = f"{'mode':<24}{'variant':<16}{'flagged':>12}  " + "  ".join(
            f"{n + ' min/med/max':>30}" for n in names
        )
        print(header)
        table = {}
        for label in labels:
            variants = sorted({r.variant for r in mine if r.mode == label})
            for variant in variants:
                sel = [r for r in mine if r.mode == label and r.variant == variant]
                cheats = [r for r in sel if r.cheated] if label == "partial" else sel
                rate = sum(r.flagged for r in cheats) / len(cheats)
                detail = f"{sum(r.flagged for r in cheats)}/{len(cheats)}"
                if label == "partial":
                    detail += f" (all {sum(r.flagged for r in sel)}/{len(sel)})"
                cells = "  ".join(
                    f"{_spread([r.metrics[n] for r in sel if n in r.metrics]):>30}" for n in names
                )
                print(f"{label:<24}{variant:<16}{detail:>12}  {cells}")
                table[f"{label} | {variant}"] = {
                    "flagged_rate": rate,
                    "checked": len(cheats),
                    "metrics": {n: [r.metrics[n] for r in sel if n in r.metrics] for n in names},
                }
        summary["verifiers"][verifier] = {"cost_vs_train_step": cost, "rows": table}
    return summary


def measure_cost(preset: str, setup: Setup, data: TokenDataset, repeat: int = 9) -> dict:
    """Median seconds of one honest training step and of one check of it, for a model preset."""
    config = llama_config(preset, vocab_size=256, max_seq_len=setup.seq_len)
    model = build_model(config, seed=0)
    opt = DistroOptimizer(model.named_parameters(), setup.distro(), setup.schedule())
    replayer = Replayer(build_model(config, seed=1), setup.distro(), setup.schedule())
    train, check, replay = [], [], []
    for t in range(repeat + 2):
        batch = BatchId(t * setup.batch_per_replica, (t + 1) * setup.batch_per_replica)
        tokens = data.sequences(batch)
        weights = snapshot_weights(model)
        before = state_bytes(opt, t - 1 if t else BEFORE_ANY_STEP)
        started = time.perf_counter()
        result, _ = train_step(model, opt, t, batch, tokens)
        payload = opt.codec.encode(result)
        after = state_bytes(opt, t)
        train.append(time.perf_counter() - started)
        started = time.perf_counter()
        seed = t.to_bytes(8, "little")
        committed = commit(before, opt.layout), commit(after, opt.layout)
        verdict = check_step(
            replayer, step=t, batch=batch, sequences=tokens, weights=weights, published=payload,
            state_before=committed[0], state_before_commitment=committed[0].commitment,
            state_after=committed[1], state_after_commitment=committed[1].commitment, seed=seed, cold_start=t == 0,
        )  # fmt: skip
        wanted = set(
            parts_to_fetch(
                opt.layout, sample_bands(opt.layout, seed), *(c.manifest for c in committed)
            )
        )
        fetched = sum(len(b) for c in committed for h, b in c.parts.items() if h in wanted) + sum(
            len(c.manifest.encode()) for c in committed
        )
        check.append(time.perf_counter() - started)
        replay.append(verdict.metrics["replay_seconds"])
        if not verdict.passed:
            raise RuntimeError(f"{preset}: an honest step failed its check: {verdict.reason}")
    train_s, check_s, replay_s = (statistics.median(x[2:]) for x in (train, check, replay))
    params = sum(p.numel() for p in model.parameters())
    state_mb = len(after) / 1e6
    print(
        f"  {preset:<6} {params / 1e6:5.1f}M params: train step {train_s * 1000:7.1f} ms, check "
        f"{check_s * 1000:7.1f} ms = {check_s / train_s:.2f} x (replay {replay_s / train_s:.2f} x), "
        f"state {state_mb:.1f} MB, a check fetches {fetched / 1e6:.1f} MB of the two"
    )
    return {"params": params, "train_s": train_s, "check_s": check_s, "replay_s": replay_s,
            "state_bytes": len(after), "check_bytes": fetched}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Setup()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--replicas", type=int, default=defaults.replicas)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--bf16", action="store_true", help="bf16 values instead of 1-bit")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--cost-presets", default="tiny,small", help="model presets for the cost of one check"
    )
    parser.add_argument("--out", type=Path, default=HERE / "out" / "verifier_study.json")
    args = parser.parse_args()
    setup = dataclasses.replace(
        defaults,
        steps=args.steps,
        warmup=args.warmup,
        replicas=args.replicas,
        threads=args.threads,
        quantize_1bit=not args.bf16,
    )
    torch.set_num_threads(setup.threads)
    started = time.perf_counter()
    data = TokenDataset(ByteTokenizer().encode(kjv_text()), setup.seq_len, seed=setup.seed)
    sim = Sim(setup, data)
    verifiers = Verifiers(sim)
    for _ in range(setup.warmup):
        sim.round()
    warm = sim.snapshot()
    print(
        f"tiny Llama, {setup.replicas} replicas x {setup.batch_per_replica} x {setup.seq_len} "
        f"KJV bytes, chunk {setup.chunk} top-{setup.topk} "
        f"{'1-bit' if setup.quantize_1bit else 'bf16'}, {setup.warmup} warm-up + {setup.steps} "
        f"steps per mode, {setup.threads} threads"
    )
    rows: list[Row] = []
    for mode in ("honest", *args.modes.split(",")):
        run_mode(sim, verifiers, warm, mode, setup.steps, rows, print)
    train_s = statistics.median(r.seconds for r in rows if r.verifier == "train")
    thresholds = apply_thresholds(rows)
    summary = print_tables(rows, thresholds, train_s)
    print(
        f"\ncost of a recompute check ({setup.batch_per_replica} x {setup.seq_len} tokens a step):"
    )
    summary["cost"] = {
        preset: measure_cost(preset, setup, data)
        for preset in args.cost_presets.split(",")
        if preset
    }
    summary["setup"] = dataclasses.asdict(setup)
    summary["seconds"] = time.perf_counter() - started
    print(f"\ntotal {summary['seconds']:.0f} s; one training step {train_s * 1000:.0f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
