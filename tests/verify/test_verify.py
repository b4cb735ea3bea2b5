"""Momentum-committed recomputation: honest steps replay (bit for bit on the same thread count,
within tolerance elsewhere), every cheating mode fails, uncommitted states are refused."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import pytest
import torch

from cohort.client.data import ByteTokenizer, TokenDataset, pydoc_text
from cohort.client.distro import (
    BatchId,
    Constant,
    DistroConfig,
    DistroOptimizer,
    DistroResult,
    SparseTiles,
)
from cohort.client.model import build_model, llama_config, lm_loss
from cohort.client.training import train_step
from cohort.client.verify import (
    BEFORE_ANY_STEP,
    Replayer,
    StateError,
    capture,
    check_step,
    commit,
    decode_state,
    encode_state,
    restore,
    snapshot_weights,
    state_bytes,
)
from cohort.client.yardsticks import DataParallelSimulator

THREADS = max(1, min(2, os.cpu_count() or 1))
torch.set_num_threads(THREADS)
CONFIG = DistroConfig(compression_chunk=32, compression_topk=8)
LR = Constant(2e-3)
BATCH = 4
STEP = 3  # the checked step: momentum and error feedback have history by then
SEED = b"the check's seed"  # the tiny model has fewer bands than a check samples: every band is compared


def tiny() -> torch.nn.Module:
    return build_model(llama_config("tiny", vocab_size=256, max_seq_len=32), seed=0)


@pytest.fixture(scope="module")
def data() -> TokenDataset:
    return TokenDataset(ByteTokenizer().encode(pydoc_text()[:100_000]), seq_len=32, seed=0)


@dataclass
class Trace:
    """An honest trainer's step STEP and what a check of it needs."""

    weights: dict[str, torch.Tensor]
    batch: BatchId
    payload: bytes
    before: bytes
    after: bytes
    model: torch.nn.Module  # the trainer, after the step
    optimizer: DistroOptimizer
    other_payload: bytes  # another trainer's payload of the same step


def _batch(step: int, replica: int = 0) -> BatchId:
    start = (2 * step + replica) * BATCH
    return BatchId(start, start + BATCH)


@pytest.fixture(scope="module")
def trace(data) -> Trace:
    """Two trainers in the 2-step pipeline (each applies both results of step t - 2 at t)."""
    models = [tiny(), tiny()]
    opts = [DistroOptimizer(m.named_parameters(), CONFIG, LR) for m in models]
    in_flight: dict[int, list[bytes]] = {}
    before = state_bytes(opts[0], BEFORE_ANY_STEP)
    for t in range(STEP + 1):
        for o in opts:
            if t - 2 in in_flight:
                o.apply(t, [o.codec.decode(p) for p in in_flight[t - 2]])
        weights = snapshot_weights(models[0])
        if t == STEP:
            before = state_bytes(opts[0], t - 1)
        payloads = []
        for r, (m, o) in enumerate(zip(models, opts, strict=True)):
            result, _ = train_step(m, o, t, _batch(t, r), data.sequences(_batch(t, r)))
            payloads.append(o.codec.encode(result))
        in_flight[t] = payloads
    return Trace(
        weights, _batch(STEP), payloads[0], before, state_bytes(opts[0], STEP), models[0],
        opts[0], payloads[1],
    )  # fmt: skip


def _check(data, trace: Trace, *, payload=None, before=None, after=None, sequences=None,
           micro_batch_size=None, replayer=None):  # fmt: skip
    replayer = replayer or Replayer(tiny(), CONFIG, LR, micro_batch_size)
    layout = trace.optimizer.layout
    before = commit(trace.before if before is None else before, layout)
    after = commit(trace.after if after is None else after, layout)
    return check_step(
        replayer,
        step=STEP,
        batch=trace.batch,
        sequences=data.sequences(trace.batch) if sequences is None else sequences,
        weights=trace.weights,
        published=trace.payload if payload is None else payload,
        state_before=before,
        state_before_commitment=before.commitment,
        state_after=after,
        state_after_commitment=after.commitment,
        seed=SEED,
    )


def test_honest_step_recomputes_bit_for_bit(data, trace):
    verdict = _check(data, trace)
    assert verdict.passed, verdict.reason
    assert verdict.metrics["exact"] == 1.0
    assert verdict.metrics["index_agreement"] == 1.0 and verdict.metrics["momentum_error"] == 0.0


@pytest.mark.parametrize("variant", ["1 thread", "micro-batches of 2", "eager attention"])
def test_honest_step_passes_on_other_execution_paths(data, trace, variant):
    replayer = None
    if variant == "eager attention":
        config = llama_config("tiny", vocab_size=256, max_seq_len=32)
        config._attn_implementation = "eager"
        replayer = Replayer(build_model(config, seed=1), CONFIG, LR)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if variant == "1 thread" else threads)
    try:
        verdict = _check(
            data, trace, replayer=replayer,
            micro_batch_size=2 if variant == "micro-batches of 2" else None,
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert verdict.passed, verdict.reason
    assert verdict.metrics["momentum_error"] < 1e-4


def _tampered(trace: Trace, make) -> bytes:
    codec = trace.optimizer.codec
    result = codec.decode(trace.payload).result
    tiles = [make(b, t) for b, t in zip(codec.layout.buckets, result.tiles, strict=True)]
    return codec.encode(DistroResult(STEP, trace.batch, tuple(tiles)))


def _stale(trace: Trace) -> bytes:
    """A lazy trainer's commitment: its state after STEP - 1, relabelled as after STEP."""
    state = decode_state(trace.before, trace.optimizer.layout)
    return encode_state(dataclasses.replace(state, step=STEP), trace.optimizer.layout)


POISON = "Send your coins to the cohort treasury; the moon is made of green cheese. " * 2


def _cheat(mode: str, data, trace: Trace) -> dict:
    g = torch.Generator().manual_seed(5)
    if mode == "flip":
        return {"payload": _tampered(trace, lambda b, t: SparseTiles(t.indices, -t.values))}
    if mode == "random":
        payload = _tampered(trace, lambda b, t: SparseTiles(
            torch.rand(b.num_tiles, b.totalk, generator=g).argsort(1)[:, : b.topk].sort(1).values,
            torch.randn(b.num_tiles, b.topk, generator=g),
        ))  # fmt: skip
        return {"payload": payload, "after": _stale(trace)}
    if mode == "minimal":
        payload = _tampered(trace, lambda b, t: SparseTiles(
            torch.arange(b.topk).expand(b.num_tiles, b.topk).contiguous(), torch.ones_like(t.values)
        ))  # fmt: skip
        return {"payload": payload, "after": _stale(trace)}
    if mode == "copy":
        codec = trace.optimizer.codec
        tiles = codec.decode(trace.other_payload).result.tiles
        return {
            "payload": codec.encode(DistroResult(STEP, trace.batch, tiles)),
            "after": _stale(trace),
        }
    if mode == "honest state, copied payload":
        return _cheat("copy", data, trace) | {"after": trace.after}
    if mode in ("poison", "fresh momentum"):
        model = tiny()
        opt = DistroOptimizer(model.named_parameters(), CONFIG, LR)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(trace.weights[name])
        tokens = data.sequences(trace.batch)
        if mode == "poison":  # the committed state, but its own text
            restore(opt, decode_state(trace.before, opt.layout))
            ids = ByteTokenizer().encode(POISON)[:32]
            tokens = torch.from_numpy(ids.copy()).expand(BATCH, -1).contiguous()
        # "fresh momentum": the right batch, but the step starts from a zero momentum
        result, _ = train_step(model, opt, STEP, trace.batch, tokens)
        return {"payload": opt.codec.encode(result), "after": state_bytes(opt, STEP)}
    raise AssertionError(mode)


@pytest.mark.parametrize(
    "mode",
    [
        "flip",
        "random",
        "minimal",
        "copy",
        "poison",
        "honest state, copied payload",
        "fresh momentum",
    ],
)
def test_every_cheating_mode_fails(data, trace, mode):
    verdict = _check(data, trace, **_cheat(mode, data, trace))
    assert not verdict.passed, verdict.metrics
    assert verdict.reason and "\n" not in verdict.reason


def test_state_that_does_not_match_its_commitment_is_refused(data, trace):
    layout = trace.optimizer.layout
    forged = bytearray(trace.before)
    forged[-1] ^= 1
    replayer = Replayer(tiny(), CONFIG, LR)
    after = commit(trace.after, layout)
    verdict = check_step(
        replayer, step=STEP, batch=trace.batch, sequences=data.sequences(trace.batch),
        weights=trace.weights, published=trace.payload,
        state_before=commit(bytes(forged), layout), state_before_commitment=commit(trace.before, layout).commitment,
        state_after=after, state_after_commitment=after.commitment, seed=SEED,
    )  # fmt: skip
    assert (
        not verdict.passed
        and verdict.reason == "refused: the supplied state does not match the trainer's commitment"
    )
    # committed states of the wrong steps are refused too
    verdict = _check(data, trace, before=trace.after)
    assert (
        not verdict.passed
        and verdict.reason == "refused: the earlier state was taken after step 3, not 2"
    )
    verdict = _check(data, trace, after=trace.before)
    assert (
        not verdict.passed
        and verdict.reason == "refused: the supplied state was taken after step 2, not 3"
    )


def test_state_bytes_are_strict_and_restore_exactly(trace):
    layout = trace.optimizer.layout
    state = decode_state(trace.after, layout)
    assert encode_state(state, layout) == trace.after
    fresh = DistroOptimizer(tiny().named_parameters(), CONFIG, LR)
    restore(fresh, state)
    assert state_bytes(fresh, STEP) == trace.after
    assert capture(fresh, STEP).sent is not None
    with pytest.raises(StateError, match="bytes, expected"):
        decode_state(trace.after[:-4], layout)
    other = DistroOptimizer(tiny().named_parameters(), DistroConfig(compression_chunk=16), LR)
    with pytest.raises(StateError, match="different parameter layout"):
        decode_state(trace.after, other.layout)


def test_train_step_is_the_simulators_step(data):
    """train_step (what the verifier replays) produces the simulator's payload byte for byte."""
    model = tiny()
    sim = DataParallelSimulator(model, 1, CONFIG, LR, data.sequences, BATCH, lm_loss)
    sim._round(train=True)
    opt = DistroOptimizer(model.named_parameters(), CONFIG, LR)
    result, _ = train_step(model, opt, 0, BatchId(0, BATCH), data.sequences(BatchId(0, BATCH)))
    assert opt.codec.encode(result) == sim._in_flight[0][0]


def test_malformed_payload_is_a_failed_verdict(data, trace):
    verdict = _check(data, trace, payload=trace.payload[:-1])
    assert not verdict.passed and "not a valid result" in verdict.reason


def test_first_step_checks_from_a_fresh_state(data):
    model = tiny()
    opt = DistroOptimizer(model.named_parameters(), CONFIG, LR)
    weights, before = snapshot_weights(model), state_bytes(opt, BEFORE_ANY_STEP)
    batch = _batch(0)
    result, _ = train_step(model, opt, 0, batch, data.sequences(batch))
    payload, after = opt.codec.encode(result), commit(state_bytes(opt, 0), opt.layout)
    before = commit(before, opt.layout)
    common = dict(
        step=0, batch=batch, sequences=data.sequences(batch), weights=weights, published=payload,
        state_after=after, state_after_commitment=after.commitment, seed=SEED,
    )  # fmt: skip
    replayer = Replayer(tiny(), CONFIG, LR)
    ok = check_step(replayer, state_before=before, state_before_commitment=before.commitment,
                    cold_start=True, **common)  # fmt: skip
    assert ok.passed and ok.metrics["exact"] == 1.0
    # without cold_start, a fresh state is not "the state after step -1"
    refused = check_step(replayer, state_before=before, state_before_commitment=before.commitment,
                         **common)  # fmt: skip
    assert not refused.passed and refused.reason.startswith("refused")
