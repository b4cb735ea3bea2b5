"""Sampled checks: a state is committed as a manifest of hashed parts, a check's seed samples a few tile bands,
and the verifier reads only the sign plane and the parts that hold them — and still judges honest and
cheating steps as a whole-state check does."""

from __future__ import annotations

import dataclasses
import os

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
from cohort.client.model import build_model, llama_config
from cohort.client.p2p.manifest import Manifest
from cohort.client.training import train_step
from cohort.client.verify import (
    CHECK_SAMPLES,
    CommittedParts,
    Replayer,
    check_step,
    commit,
    decode_state,
    encode_state,
    parts_to_fetch,
    sample_bands,
    snapshot_weights,
    state_bytes,
    write_state,
)
from cohort.client.verify.sample import state_manifest
from cohort.client.verify.state import SIGNS_FILE

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
CONFIG = DistroConfig(compression_chunk=32, compression_topk=8)
LR = Constant(2e-3)
SEED = b"drawn after the step was decided"


def small() -> torch.nn.Module:  # ~4.8M parameters: more bands than a check samples
    return build_model(llama_config("small", vocab_size=256, max_seq_len=32), seed=0)


@pytest.fixture(scope="module")
def steps():
    """One trainer's steps 0-2: the weights before step 2, its payload, its states after steps 1 and 2."""
    data = TokenDataset(ByteTokenizer().encode(pydoc_text()[:50_000]), seq_len=32, seed=0)
    model = small()
    opt = DistroOptimizer(model.named_parameters(), CONFIG, LR)
    for step in range(3):
        batch = BatchId(4 * step, 4 * step + 4)
        if step == 2:
            weights, before = snapshot_weights(model), state_bytes(opt, 1)
        result, _ = train_step(model, opt, step, batch, data.sequences(batch))
    return dict(opt=opt, weights=weights, before=before, after=state_bytes(opt, 2), batch=batch,
                sequences=data.sequences(batch), payload=opt.codec.encode(result))  # fmt: skip


def _only(parts: CommittedParts, wanted: list[bytes]) -> CommittedParts:
    return CommittedParts(parts.manifest, {h: b for h, b in parts.parts.items() if h in wanted})


def _check(steps, before: bytes | None = None, after: bytes | None = None, payload: bytes | None = None,
           seed: bytes = SEED):  # fmt: skip
    layout = steps["opt"].layout
    b, a = commit(before or steps["before"], layout), commit(after or steps["after"], layout)
    honest_b, honest_a = commit(steps["before"], layout), commit(steps["after"], layout)
    wanted = parts_to_fetch(layout, sample_bands(layout, seed), b.manifest, a.manifest)
    verdict = check_step(Replayer(small(), CONFIG, LR), step=2, batch=steps["batch"], sequences=steps["sequences"],
                         weights=steps["weights"], published=payload or steps["payload"],
                         state_before=_only(b, wanted), state_before_commitment=b.commitment,
                         state_after=_only(a, wanted), state_after_commitment=a.commitment, seed=seed)  # fmt: skip
    read = sum(len(p) for h, p in (b.parts | a.parts).items() if h in wanted)
    whole = sum(
        f.size for f in honest_b.manifest.files + honest_a.manifest.files if f.name != SIGNS_FILE
    )
    return verdict, read / whole


def test_a_state_written_to_disk_commits_like_its_bytes(steps, tmp_path):
    opt = steps["opt"]
    written = write_state(opt, 2, tmp_path / "state")
    assert written.commitment == commit(steps["after"], opt.layout).commitment
    assert state_manifest(written.manifest.encode(), opt.layout) == written.manifest


def test_the_sample_is_drawn_from_the_seed(steps):
    layout = steps["opt"].layout
    first, again, other = (
        sample_bands(layout, b"a"),
        sample_bands(layout, b"a"),
        sample_bands(layout, b"b"),
    )
    assert first == again and first != other and len(first) == len(set(first)) == CHECK_SAMPLES
    assert list(first) == sorted(first, key=lambda s: (s.bucket, s.band.start))
    assert (
        len(sample_bands(layout, b"a", count=10_000)) < 10_000
    )  # every band, once, when asked for more


def test_an_honest_step_passes_reading_a_fraction_of_its_states(steps):
    verdict, fraction = _check(steps)
    assert verdict.passed and verdict.metrics["exact"] == 1.0, verdict
    print(
        f"sampled {verdict.metrics['sampled']:.3f} of the values, read {fraction:.3f} of the two states"
    )
    assert 0 < verdict.metrics["sampled"] < 0.6 and fraction < 0.7, (verdict.metrics, fraction)
    for seed in (b"1", b"2"):  # other samples of the same step
        assert _check(steps, seed=seed)[0].passed


def test_cheats_fail_on_the_sample(steps):
    codec = steps["opt"].codec
    result = codec.decode(steps["payload"]).result
    flipped = codec.encode(DistroResult(2, steps["batch"], tuple(SparseTiles(t.indices, -t.values)
                                                                 for t in result.tiles)))  # fmt: skip
    assert not _check(steps, payload=flipped)[0].passed
    lazy = decode_state(
        steps["before"], steps["opt"].layout
    )  # the state before the step, relabelled
    stale = encode_state(dataclasses.replace(lazy, step=2), steps["opt"].layout)
    verdict, _ = _check(steps, after=stale)
    assert not verdict.passed and "momentum" in verdict.reason


def test_a_sign_plane_that_contradicts_the_momentum_is_refused(steps):
    layout = steps["opt"].layout
    honest = commit(steps["before"], layout)
    sample = sample_bands(layout, SEED)[0]
    # the first sampled band's momentum negated in state.bin, the sign plane left as committed
    state = decode_state(steps["before"], layout)
    rows = state.momentum[sample.bucket].reshape(-1, layout.buckets[sample.bucket].row_width)
    rows[sample.band.start : sample.band.end].neg_()
    forged = commit(encode_state(state, layout), layout)
    signs = honest.file(SIGNS_FILE)
    mixed = Manifest(forged.manifest.chunk_size, (signs, forged.file("state.bin")))
    parts = CommittedParts(mixed, honest.parts | forged.parts)
    after = commit(steps["after"], layout)
    verdict = check_step(Replayer(small(), CONFIG, LR), step=2, batch=steps["batch"], sequences=steps["sequences"],
                         weights=steps["weights"], published=steps["payload"], state_before=parts,
                         state_before_commitment=parts.commitment, state_after=after,
                         state_after_commitment=after.commitment, seed=SEED)  # fmt: skip
    assert (
        not verdict.passed
        and verdict.reason == "refused: its committed sign plane disagrees with its momentum"
    )
