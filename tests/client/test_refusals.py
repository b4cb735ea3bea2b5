"""`cohort train` refuses what it cannot do with one line and a distinct exit code, and sends nothing."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cohort.client.runtime.local_run import LocalRun, free_port_pair
from cohort.client.runtime.options import ExitCode


def train(
    lr: LocalRun, wallet: Path, run: str, cluster: str | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "COHORT_CLUSTER": cluster or lr.http_url, "COHORT_WALLET": str(wallet),
           "COHORT_PROGRAM_ID": str(lr.program_id), "COHORT_ANCHORFILE": str(lr.root / "Anchorfile.toml")}  # fmt: skip
    (lr.root / "Anchorfile.toml").touch()
    return subprocess.run([sys.executable, "-m", "cohort.sdk.cli", "train", "--run", run, "--logs", "none"],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


async def test_refusals_are_one_line_with_distinct_exit_codes(ci_config: Path, tmp_path: Path):
    async with LocalRun(config=ci_config, root=tmp_path / "run") as lr:
        await lr.create_run()
        funded, funded_path = lr.new_wallet("funded")
        await lr.fund(funded)
        _, broke_path = lr.new_wallet("broke")
        # a second run that admits only authorized wallets, and a third that is paused
        authorized = dataclasses.replace(lr.run_file, run_id="members-only", config=dataclasses.replace(
            lr.run_file.config, join_policy="Authorized"))  # fmt: skip
        await lr.client.create_run(lr.authority, authorized)
        paused = dataclasses.replace(lr.run_file, run_id="paused-run")
        await lr.client.create_run(lr.authority, paused)
        await lr.client.set_paused(lr.authority, "paused-run", True)
        before = int(await lr.rpc.raw_request("getTransactionCount", []))

        asked = {
            "unknown run": (funded_path, "no-such-run", None, ExitCode.RUN_NOT_FOUND, "no run 'no-such-run'"),
            "paused run": (funded_path, "paused-run", None, ExitCode.RUN_HALTED, "is paused"),
            "not authorized": (funded_path, "members-only", None, ExitCode.NOT_AUTHORIZED, "authorized wallets"),
            "unfunded wallet": (broke_path, lr.run_file.run_id, None, ExitCode.UNFUNDED, "SOL"),
            "unreachable RPC": (funded_path, lr.run_file.run_id, f"http://127.0.0.1:{free_port_pair()}",
                                ExitCode.RPC_UNREACHABLE, "127.0.0.1"),
        }  # fmt: skip
        # the five processes at once: each spends seconds starting Python, none waits on another
        with ThreadPoolExecutor(len(asked)) as pool:
            running = {what: pool.submit(train, lr, wallet, run, cluster)
                       for what, (wallet, run, cluster, _, _) in asked.items()}  # fmt: skip
            cases = {what: (running[what].result(), code, words)
                     for what, (_, _, _, code, words) in asked.items()}  # fmt: skip
        for what, (done, code, words) in cases.items():
            lines = done.stderr.strip().splitlines()
            assert done.returncode == code, (what, done.returncode, done.stderr[-2000:])
            assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], (
                what,
                lines,
            )
            assert "Traceback" not in done.stdout + done.stderr, what
        assert len({code for _, code, _ in cases.values()}) == len(cases)  # distinct
        assert (
            int(await lr.rpc.raw_request("getTransactionCount", [])) == before
        )  # nothing was sent
