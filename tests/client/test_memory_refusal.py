"""`cohort train` refuses a run whose model its device cannot hold: one line, its own exit code, before the
model is built or anything is sent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.client.runtime.local_run import LocalRun, read_events
from cohort.client.runtime.memory import available_memory, check_memory, largest_micro_batch
from cohort.client.runtime.options import ClientOptions, ClientRefused, ExitCode
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file
from cohort.sdk.sizing import GIB, run_estimate


def _options(**values) -> ClientOptions:
    return ClientOptions(run="r", wallet=Path("w.json"), cluster_urls=("http://127.0.0.1:1",),
                         program_id="11111111111111111111111111111111", device="cpu", **values)  # fmt: skip


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    from cohort.client.runtime.local_run import write_config

    path = write_config(tmp_path_factory.mktemp("run") / "run.toml")
    return load_run_file(path, CoordinatorCore())


def test_a_model_that_fits_passes_and_one_that_does_not_is_refused(run_file):
    spec, config = training_spec(run_file.metadata, run_file.model), run_file.config
    estimate = check_memory(
        spec, config, "demo", _options()
    )  # the demo's 0.9M Llama fits any machine
    assert estimate is not None and estimate.total < 1 * GIB
    with pytest.raises(ClientRefused) as refused:
        check_memory(spec, config, "demo", _options(memory_limit=0.001))
    assert refused.value.code == ExitCode.TOO_LITTLE_MEMORY
    message = str(refused.value)
    assert (
        "\n" not in message
        and "cannot be trained here" in message
        and "--memory-limit allows 1.0 MiB" in message
    )
    # a synthetic member holds no model: nothing to check
    assert check_memory(spec, config, "demo", _options(memory_limit=0.001, synthetic=True)) is None


def test_a_disk_that_cannot_hold_what_a_member_keeps_is_refused(run_file, monkeypatch, tmp_path):
    """The free space under the checkpoint directory against sizing's disk estimate (checkpoints, and with
    verification the weight snapshots and committed states): one line, its own exit code."""
    import dataclasses

    from cohort.client.runtime import disk

    spec = training_spec(run_file.metadata, run_file.model)
    config = dataclasses.replace(run_file.config, verification_percent=5)
    options = _options(checkpoint_dir=tmp_path / "not-yet" / "made")
    estimate = disk.check_disk(spec, config, "demo", options)
    assert estimate is not None and 0 < estimate.checkpoints < estimate.snapshots
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: shutil_usage(estimate.total - 1))
    with pytest.raises(ClientRefused) as refused:
        disk.check_disk(spec, config, "demo", options)
    message = str(refused.value)
    assert refused.value.code == ExitCode.TOO_LITTLE_DISK and "\n" not in message
    assert f"{tmp_path} has " in message and "weight snapshots for checks" in message
    assert "--checkpoint-dir" in message
    unverified = dataclasses.replace(config, verification_percent=0)
    assert disk.check_disk(spec, unverified, "demo", options) is not None  # checkpoints alone fit
    assert disk.check_disk(spec, config, "demo", _options(synthetic=True)) is None


def shutil_usage(free: int):
    import shutil

    return shutil._ntuple_diskusage(free * 2, free, free)


def test_a_refusal_names_the_micro_batch_that_would_fit(run_file):
    spec, config = training_spec(run_file.metadata, run_file.model), run_file.config
    whole, one = run_estimate(spec, config), run_estimate(spec, config, 1)
    assert whole is not None and one is not None and whole.micro_batch_size == 8
    limit = (
        one.total + whole.total
    ) / 2  # room for a few sequences a micro-batch, not the whole share
    fits = largest_micro_batch(spec, config, int(limit), whole.micro_batch_size)
    assert 1 <= fits < whole.micro_batch_size
    with pytest.raises(ClientRefused, match=f"--micro-batch-size {fits} would fit"):
        check_memory(spec, config, "demo", _options(memory_limit=limit / GIB))


def test_available_memory_reads_meminfo(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:    2048 kB\n"
    )
    assert available_memory("cpu", meminfo) == 2048 * 1024
    assert available_memory("cpu", tmp_path / "none") > 0  # no /proc: the free pages


async def test_cohort_train_refuses_before_building_the_model(ci_config: Path, tmp_path: Path):
    async with LocalRun(config=ci_config, root=tmp_path / "run") as lr:
        await lr.create_run()
        wallet, wallet_path = lr.new_wallet("small")
        await lr.fund(wallet)
        before = int(await lr.rpc.raw_request("getTransactionCount", []))
        events = tmp_path / "small.events.jsonl"
        env = {**os.environ, "COHORT_CLUSTER": lr.http_url, "COHORT_WALLET": str(wallet_path),
               "COHORT_PROGRAM_ID": str(lr.program_id), "COHORT_ANCHORFILE": str(lr.root / "Anchorfile.toml")}  # fmt: skip
        (lr.root / "Anchorfile.toml").touch()
        done = subprocess.run([sys.executable, "-m", "cohort.sdk.cli", "train", "--run", lr.run_file.run_id,
                               "--logs", "none", "--events", str(events), "--memory-limit", "0.001"],
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        lines = done.stderr.strip().splitlines()
        assert done.returncode == ExitCode.TOO_LITTLE_MEMORY, (done.returncode, done.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("Error: "), lines
        assert "a member needs about" in lines[0] and "--memory-limit allows 1.0 MiB" in lines[0], (
            lines
        )
        assert "Traceback" not in done.stdout + done.stderr
        # it stopped right where it read the run: no P2P node, no model
        recorded = read_events(events)
        assert [e["event"] for e in recorded] == ["connected", "refused"], recorded
        assert recorded[-1]["code"] == ExitCode.TOO_LITTLE_MEMORY
        assert (
            int(await lr.rpc.raw_request("getTransactionCount", [])) == before
        )  # nothing was sent
