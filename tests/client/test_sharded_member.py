"""`cohort train --nproc-per-node 2`: one member in two gloo ranks (a ShardedReplica on rank 0, serve_rank on
rank 1), started like torchrun, trains a run on a real localnet beside two one-process members. Every member
ends the epoch with the same weights and writes the same checkpoint (the sharded member's loads with
`transformers` and holds exactly those weights), every decided round applies all three members' results,
and SIGTERM to the launcher reaches the ranks: rank 0 leaves the run, lets rank 1 go, and all exit 0. A run
that verifies results is refused in one line before any rank starts, and --nproc-per-node is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cohort.client.runtime.cli import train
from cohort.client.runtime.launch import RankEnv
from cohort.client.runtime.local_run import LocalRun, TrainerProcess, failures, read_events
from cohort.client.runtime.options import ExitCode
from cohort.sdk.models import RunState

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:  # after the name: state, ppid, ...
                out.append(int(entry.name))
    return out


async def launched_ranks(launcher: subprocess.Popen, count: int, timeout: float = 30.0) -> list[int]:
    """The pids of a launcher's `count` ranks, once it started them all (fewer if it did not in time)."""
    until = time.monotonic() + timeout
    while len(found := children(launcher.pid)) < count and launcher.poll() is None and time.monotonic() < until:
        await asyncio.sleep(0.2)
    return found


def test_nproc_per_node_and_the_rank_environment_are_checked():
    runner = CliRunner()
    for bad in ("0", "65"):
        done = runner.invoke(train, ["--run", "r", "--nproc-per-node", bad], env={"WORLD_SIZE": ""})
        assert done.exit_code == 2 and "1<=x<=64" in done.output, done.output
    done = runner.invoke(train, ["--run", "r", "--nproc-per-node", "2", "--synthetic"], env={"WORLD_SIZE": ""})
    assert done.exit_code == 2 and "--synthetic" in done.output, done.output
    done = runner.invoke(train, ["--run", "r", "--nproc-per-node", "2", "--device", "cuda:1"], env={"WORLD_SIZE": ""})
    assert done.exit_code == 2 and "--device cuda" in done.output, done.output

    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert RankEnv.from_environ({}) is None and RankEnv.from_environ({"WORLD_SIZE": "1", "RANK": "0"}) is None
    assert RankEnv.from_environ({**base, "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}) == RankEnv(1, 1, 2)
    for bad_env in ({**base, "WORLD_SIZE": "2"}, {**base, "WORLD_SIZE": "4", "RANK": "0", "LOCAL_WORLD_SIZE": "2"},
                    {**base, "WORLD_SIZE": "2", "RANK": "2"}, {"WORLD_SIZE": "2", "RANK": "0"}):  # fmt: skip
        with pytest.raises(ValueError):
            RankEnv.from_environ(bad_env)


async def test_a_two_rank_member_trains_beside_one_process_members(ci_config: Path, tmp_path: Path):
    started = time.monotonic()
    checkpoints = tmp_path / "checkpoints"

    def options(i: int) -> dict:
        ranks = ("--nproc-per-node", "2") if i == 0 else ()
        return {"extra": (*ranks, "--checkpoint-dir", str(checkpoints / f"c{i}"))}

    ranks: list[int] = []
    try:
        async with LocalRun(config=ci_config, root=tmp_path / "run") as lr:
            trainers = await lr.start_members(3, options=options)
            ranks = await launched_ranks(trainers[0].process, 2)
            await check_member(lr, trainers, ranks, checkpoints, tmp_path)
    finally:  # each rank has a process group of its own: a launcher killed mid-test must not leave them
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    print(f"sharded member test: {time.monotonic() - started:.1f} s")


async def check_member(lr: LocalRun, trainers: list[TrainerProcess], ranks: list[int], checkpoints: Path,
                       tmp_path: Path) -> None:  # fmt: skip
    sharded, *others = trainers
    assert len(ranks) == 2, ranks  # the launcher's two ranks

    # a run that verifies results: one line, exit code 2, and no rank started (no client event written)
    verifying = dataclasses.replace(lr.run_file, run_id="verifying", config=dataclasses.replace(
        lr.run_file.config, verification_percent=50))  # fmt: skip
    await lr.client.create_run(lr.authority, verifying)
    events = tmp_path / "refused.events.jsonl"
    env = {**os.environ, "COHORT_CLUSTER": lr.http_url, "COHORT_WALLET": str(sharded.wallet_path),
           "COHORT_PROGRAM_ID": str(lr.program_id), "COHORT_ANCHORFILE": str(lr.root / "Anchorfile.toml")}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "cohort.sdk.cli", "train", "--run", "verifying", "--logs", "none",
                           "--events", str(events), "--nproc-per-node", "2"],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and "verifies results" in lines[0] and "--nproc-per-node 1" in lines[0], lines
    assert not events.exists()

    # one epoch: every member ends it with the same weights and the same checkpoint
    rounds = await lr.wait_for(lambda r: r.state == RunState.RoundTrain, 90, "epoch 0's rounds")
    index = rounds.client(sharded.wallet.pubkey()).index  # its place in epoch 0
    await lr.wait_for(lambda r: r.progress.epoch >= 1, 90, "the end of epoch 0")
    await lr.wait_for_events("epoch_end", 1, 30, epoch=0)
    assert all(t.alive for t in trainers), [t.log_path.read_text()[-2000:] for t in trainers if not t.alive]
    assert not [f for t in trainers for f in failures(t)], [f for t in trainers for f in failures(t)]
    ends = {t.name: [e["digest"] for e in t.events("epoch_end") if e["epoch"] == 0] for t in trainers}
    assert len({d for digests in ends.values() for d in digests}) == 1, ends
    saved = {t.name: [e["manifest"] for e in t.events("checkpoint_saved") if e["epoch"] == 0] for t in trainers}
    assert len({m for manifests in saved.values() for m in manifests}) == 1, saved

    # the sharded member trained, and every decided round applied all three members' results
    assert len(sharded.events("trained")) >= 3
    for t in others:
        decided = [e["results"] for e in t.events("applied") if e["decided"] and e["results"]]
        assert len(decided) >= 3 and set(decided) == {3}, (t.name, decided)
    fetched = {t.name: len([e for e in t.events("fetched") if e["sender"] == index]) for t in others}
    assert all(fetched.values()), fetched  # its payloads passed the others' checks before they kept them

    # the sharded member's checkpoint is a Hugging Face model holding the epoch's weights
    from transformers import AutoModelForCausalLM

    from cohort.client.model import parameter_digest

    (path,) = [p.parent for p in (checkpoints / "c0").glob("*/config.json")]
    model = AutoModelForCausalLM.from_pretrained(path)
    assert parameter_digest(model) == ends[sharded.name][0]

    # SIGTERM to the launcher: rank 0 leaves the run (exit_run), lets rank 1 go, and everyone exits 0
    sharded.process.send_signal(signal.SIGTERM)
    assert sharded.process.wait(60) == 0, sharded.log_path.read_text()[-3000:]
    assert [e for e in read_events(sharded.events_path) if e["event"] == "exited"]
    gone = [pid for pid in ranks if not Path(f"/proc/{pid}").exists()]
    assert gone == ranks, children(sharded.process.pid)
    assert "Traceback" not in sharded.log_path.read_text()
