"""A member sharded over two gloo ranks (FSDP2) beside one-process replicas of the same run, which verifies
results: the same starting weights, the same loss, a payload that picks what the one-process replica picks,
and after applying the same decided list the same weights digest, per-round checksum and held-out loss (the
apply is exact on every rank's rows). Every step the member commits its optimizer state (streamed from its
ranks to rank 0's disk) with the commitment in its payload's header, and a one-process verifier that trained
the same earlier steps checks the member's steps from those committed parts and passes them; the member
checks that verifier's steps on its shards from its committed parts, passes them, fails a flipped payload,
and trains on with its own weights and state given back."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from cohort.client.checkpoint import CheckpointWriter
from cohort.client.distro import DistroResult
from cohort.client.distro.compress import SparseTiles, densify
from cohort.client.p2p.manifest import Manifest
from cohort.client.runtime.local_run import write_config
from cohort.client.runtime.trainer import LocalReplica
from cohort.client.verify.state import STATE_FILE, CommittedState, decode_state
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

WORKER = Path(__file__).with_name("sharded_worker.py")
CHECK_SEED = b"drawn after the member's step was decided"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch(step: int) -> tuple[int, int]:
    """The member's batch of `step` (the one-process reference trains the same)."""
    return 12 * (step - 1), 12 * (step - 1) + 6


def _other(step: int) -> tuple[int, int]:
    start, end = batch(step)
    return end, 2 * end - start  # the next sequences: a second trainer of the round


def test_a_two_rank_member_trains_applies_and_commits_as_one_replica(tmp_path):
    started = time.monotonic()
    config = write_config(tmp_path / "run.toml", max_seq_len=32)
    run_file = load_run_file(config, CoordinatorCore())
    spec = training_spec(run_file.metadata, run_file.model)
    # `one` trains the member's batches (the reference), `other` its own (and checks the member's steps)
    one, other = LocalReplica(spec, seed=7), LocalReplica(spec, seed=7)
    start = one.digest()
    writer = CheckpointWriter(tmp_path / "one-checkpoints")
    first = one.checkpoint(
        writer, run_id="t", step=0, epoch=0
    ).result()  # the member loads it at the end
    (tmp_path / "start-checkpoint.json").write_text(
        json.dumps({"path": str(first.path), "manifest": first.manifest_hex})
    )
    for replica in (one, other):
        replica.start_epoch(1, cold=False, verified=True)
    ref, checked = {}, {}
    for step in (1, 2):
        ref[step] = one.train(step, *batch(step))
        (tmp_path / f"ref-{step}.bin").write_bytes(ref[step].payload)
        checked[step] = other.train(step, *_other(step))
    decided = [ref[1].payload, checked[1].payload]  # step 1's list
    (tmp_path / "other-1.bin").write_bytes(checked[1].payload)
    for replica in (one, other):
        replica.apply(1, decided)
    applied, checksum, held_out = one.digest(), one.checksum(), one.evaluate(4).loss
    saved = one.checkpoint(
        writer, run_id="t", step=2, epoch=0
    ).result()  # what the member writes by rows
    ref[3] = one.train(3, *batch(3))
    checked[3] = other.train(3, *_other(3))
    ref[4] = one.train(4, *batch(4))  # what the member trains after its checks
    for step, trained in checked.items():  # what the member checks
        (tmp_path / f"other-{step}.bin").write_bytes(trained.payload)
    (tmp_path / "other.json").write_text(json.dumps({
        step: {"root": str(t.state.root), "manifest": t.state.manifest.encode().hex()} for step, t in checked.items()
    }))  # fmt: skip

    (tmp_path / "batches.json").write_text(json.dumps({step: batch(step) for step in (1, 2, 3, 4)}))
    port = _free_port()
    ranks = [
        subprocess.Popen([sys.executable, str(WORKER), str(config), str(tmp_path), str(rank), str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        for rank in range(2)
    ]  # fmt: skip
    try:
        errors = [rank.communicate(timeout=240)[1] for rank in ranks]
        assert [rank.returncode for rank in ranks] == [0, 0], "\n".join(e[-2000:] for e in errors)
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.wait()
    out = json.loads((tmp_path / "member.json").read_text())
    assert out["start"] == start
    for step in (1, 2, 3, 4):  # step 3 follows an evaluation, step 4 the member's checks
        assert abs(out["loss"][str(step)] - ref[step].loss) < 1e-4, (
            step,
            out["loss"],
            ref[step].loss,
        )

    # the gradients are reduced in another order: the picks must agree, the bits may differ
    codec = one.codec
    payloads = {step: (tmp_path / f"member-{step}.bin").read_bytes() for step in (1, 2, 3, 4)}
    for step in (1, 2, 3, 4):
        mine, theirs = codec.decode(ref[step].payload).result, codec.decode(payloads[step]).result
        kept = agree = 0
        for b, a, c in zip(codec.layout.buckets, mine.tiles, theirs.tiles, strict=True):
            pa, pc = densify(a, b.totalk) != 0, densify(c, b.totalk) != 0
            kept, agree = kept + int(pa.sum()), agree + int((pa & pc).sum())
        assert agree / kept > 0.95, (step, agree / kept)

    assert (
        out["applied"] == out["after_checks"] == applied != start
    )  # a check gives the weights back
    path, manifest = out[
        "checkpoint"
    ]  # written by rows, byte for byte the one-process replica's files
    assert manifest == saved.manifest_hex, (manifest, saved.manifest_hex)
    for file in sorted(p.name for p in saved.path.iterdir()):
        assert (Path(path) / file).read_bytes() == (saved.path / file).read_bytes(), file
    assert out["loaded"] == start  # a checkpoint read back by rows
    assert out["checksum"] == checksum
    assert abs(out["eval"] - held_out) < 1e-3

    # each step's payload commits the state the member wrote (the manifest's hash in its header)
    states = {}
    for step in (1, 2, 3, 4):
        s = out["states"][str(step)]
        manifest = Manifest.decode(bytes.fromhex(s["manifest"]))
        states[step] = CommittedState(Path(s["root"]), manifest)
        commitment = states[step].commitment
        assert commitment.hex() == s["commitment"] == s["header"], (step, s)
        assert (
            one.check(payloads[step]).state
            == commitment
            == hashlib.sha256(manifest.encode()).digest()
        )

    # how close the member's momentum is to the one-process reference's on the same batches
    layout = one.optimizer.layout
    closeness = {}
    for step in (1, 2, 3, 4):  # step 4: the state a check borrowed came back
        theirs = decode_state((states[step].root / STATE_FILE).read_bytes(), layout)
        mine = decode_state((ref[step].state.root / STATE_FILE).read_bytes(), layout)
        assert theirs.step == mine.step == step and theirs.sent is not None
        a, b = (
            torch.cat([m.reshape(-1) for m in mine.momentum]),
            torch.cat([m.reshape(-1) for m in theirs.momentum]),
        )
        closeness[step] = (f"{float((a - b).norm() / a.norm()):.2e}", f"{float((a == b).float().mean()):.3f}",
                           int((a.sign() != b.sign()).sum()), a.numel())  # fmt: skip
    print(
        "momentum vs one process (relative L2, share bit-equal, signs differing, values):",
        closeness,
    )
    assert all(float(c[0]) < 1e-5 for c in closeness.values()), (
        closeness
    )  # not bit-equal: reduction order

    # a one-process verifier that trained the same earlier steps checks the member's steps from its parts
    for step in (2, 3):
        before, after = states[step - 1], states[step]
        manifests = before.manifest.encode(), after.manifest.encode()
        wanted = other.check_parts(CHECK_SEED, *manifests)
        parts = before.read_parts(wanted) | after.read_parts(wanted)
        assert set(wanted) == set(parts)
        verdict = other.verify_step(step, payloads[step], payloads[step - 1], CHECK_SEED, manifests[0], parts,
                                    manifests[1], parts)  # fmt: skip
        assert verdict is not None and verdict.passed, verdict
        print(
            f"check of the member's step {step}:",
            {k: round(v, 6) for k, v in verdict.metrics.items()},
        )
    result = codec.decode(payloads[3]).result
    flipped = codec.encode(DistroResult(result.step, result.batch,
                                        tuple(SparseTiles(t.indices, -t.values) for t in result.tiles),
                                        result.state))  # fmt: skip
    verdict = other.verify_step(
        3, flipped, payloads[2], CHECK_SEED, manifests[0], parts, manifests[1], parts
    )
    assert verdict is not None and not verdict.passed  # the check is no formality

    # the member checked the one-process trainer's steps on its shards
    for step in ("2", "3"):
        passed, reason, metrics = out["checks"][step]
        assert passed, (step, reason, metrics)
        print(
            f"the member's check of step {step} on its shards:",
            {k: round(v, 6) for k, v in metrics.items()},
        )
    passed, reason, _ = out["checks"]["flipped"]
    assert not passed and "signs agree" in reason, reason
    print(f"sharded replica test: {time.monotonic() - started:.1f} s")
