"""A member sharded over two gloo ranks (FSDP2) beside a one-process replica of the same run: the same
starting weights, the same loss, a payload that picks what the one-process replica picks (here: the very
bytes), and after applying the same decided list the same weights digest, per-round checksum and held-out
loss (the apply is exact on every rank's rows)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from cohort.client.distro.compress import densify
from cohort.client.runtime.local_run import write_config
from cohort.client.runtime.trainer import LocalReplica
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

WORKER = Path(__file__).with_name("sharded_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_two_rank_member_trains_and_applies_as_one_replica(tmp_path):
    config = write_config(tmp_path / "run.toml", max_seq_len=32)
    run_file = load_run_file(config, CoordinatorCore())
    spec = training_spec(run_file.metadata, run_file.model)
    one, other = LocalReplica(spec, seed=7), LocalReplica(spec, seed=7)
    start = one.digest()
    for replica in (one, other):
        replica.start_epoch(1, cold=False)
    ref = one.train(1, 0, 6)  # the very batch the member trains
    (tmp_path / "ref-1.bin").write_bytes(ref.payload)
    (tmp_path / "other-1.bin").write_bytes(other.train(1, 6, 12).payload)  # a second trainer of the round
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
    assert abs(out["loss"] - ref.loss) < 1e-4

    # the gradients are reduced in another order: the picks must agree, the bits may differ
    codec = one.codec
    mine, theirs = codec.decode(ref.payload).result, codec.decode((tmp_path / "member-1.bin").read_bytes()).result
    kept = agree = 0
    for b, a, c in zip(codec.layout.buckets, mine.tiles, theirs.tiles, strict=True):
        pa, pc = densify(a, b.totalk) != 0, densify(c, b.totalk) != 0
        kept, agree = kept + int(pa.sum()), agree + int((pa & pc).sum())
    assert agree / kept > 0.95

    one.apply(1, [ref.payload, (tmp_path / "other-1.bin").read_bytes()])  # the round's decided list
    assert out["applied"] == one.digest() != start
    assert out["checksum"] == one.checksum()
    assert abs(out["eval"] - one.evaluate(4).loss) < 1e-3
