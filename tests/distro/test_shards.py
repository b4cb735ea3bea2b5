"""A member that spans processes: two gloo ranks each run DisTrO on their rows of every parameter. Fed the
gradients a one-process replica got, the member's assembled payload is that replica's, and after applying
the same decided lists its weights have the one-process replica's digest (the apply is exact)."""

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.client.distro import BatchId, DistroOptimizer
from cohort.client.distro.layout import plan_layout
from cohort.client.distro.shards import dim0_chunk, plan_shard
from cohort.client.model import build_model, llama_config, parameter_digest

WORKER = Path(__file__).with_name("shard_worker.py")
_spec = importlib.util.spec_from_file_location("shard_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)
STEPS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_make_one_members_payload_and_weights(tmp_path):
    model, other = (
        build_model(llama_config("tiny"), seed=0),
        build_model(llama_config("tiny"), seed=0),
    )
    optimizer = DistroOptimizer(model.named_parameters(), worker.CONFIG, worker.LR)
    other_optimizer = DistroOptimizer(other.named_parameters(), worker.CONFIG, worker.LR)
    for step in range(STEPS):  # the one-process replica, and a second trainer for the decided lists
        for opt, m, shift in ((optimizer, model, 0), (other_optimizer, other, 500)):
            opt.lookahead(step)
            for p, g in zip(m.parameters(), worker.grads_of(m, step + shift), strict=True):
                p.grad = g
        ref = optimizer.codec.encode(optimizer.generate(step, BatchId(step, step + 1)))
        more = other_optimizer.codec.encode(
            other_optimizer.generate(step, BatchId(100 + step, 101 + step))
        )
        (tmp_path / f"ref-{step}.bin").write_bytes(ref)
        (tmp_path / f"other-{step}.bin").write_bytes(more)
        decided = [optimizer.codec.decode(p) for p in (ref, more)]
        optimizer.apply(step, decided)
        other_optimizer.apply(step, decided)
    port = _free_port()
    ranks = [
        subprocess.Popen([sys.executable, str(WORKER), str(tmp_path), str(rank), "2", str(port), str(STEPS)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        for rank in range(2)
    ]  # fmt: skip
    try:
        for rank in ranks:
            _, err = rank.communicate(timeout=180)
            assert rank.returncode == 0, err[-3000:]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.wait()
    for step in range(STEPS):
        assert (tmp_path / f"member-{step}.bin").read_bytes() == (
            tmp_path / f"ref-{step}.bin"
        ).read_bytes()
    assert (tmp_path / "member.digest").read_text() == parameter_digest(model)


def test_a_split_that_would_cut_a_tile_is_refused():
    layout = plan_layout(
        [("w", (48, 32))], worker.CONFIG
    )  # 48 rows: tiles of 16; 2 ranks: 24 rows each
    with pytest.raises(ValueError, match="inside a band"):
        plan_shard(layout, 0, 2)
    assert dim0_chunk(10, 3, 4) == (9, 10) and dim0_chunk(2, 3, 4) == (2, 2)
    with pytest.raises(ValueError, match="too few rows"):
        plan_shard(
            plan_layout([("v", (2,))], worker.CONFIG), 3, 4
        )  # rank 3 of 4 holds none of 2 rows
