"""`cohort doctor [--run RUN]` against a real localnet: a machine that can join exits 0; one that cannot exits
with the code `cohort train` would refuse with (the model does not fit under --memory-limit, the RPC is
unreachable, the run does not exist, the wallet cannot pay), and says why in its table or its JSON."""

from __future__ import annotations

import json
import socket

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _doctor(ws, *args: str) -> tuple[int, dict]:
    result = ws.cli("doctor", "--json", *args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    report = json.loads(result.output)
    assert report["exit_code"] == result.exit_code and report["ok"] == (result.exit_code == 0)
    return result.exit_code, {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def doctor_run(workspace, helpers, tmp_path_factory) -> str:
    config = helpers.config_copy(tmp_path_factory.mktemp("doctor"), "doctor-run")
    result = workspace.cli("run", "create", str(config))
    assert result.exit_code == 0, result.output
    return "doctor-run"


def test_a_machine_that_can_join_exits_zero(workspace, doctor_run, tmp_path):
    code, checks = _doctor(
        workspace, "--run", doctor_run, "--checkpoint-dir", str(tmp_path / "ckpt")
    )
    assert code == 0, checks
    assert list(checks) == ["torch", "rpc", "run", "wallet", "memory", "p2p", "disk"]
    assert all(c["status"] in ("ok", "warn") for c in checks.values()), checks
    assert "ms median" in checks["rpc"]["detail"] and "llama-20m" in checks["run"]["detail"]
    assert (
        "needs about" in checks["memory"]["detail"]
        and "a member keeps on disk about" in checks["disk"]["detail"]
    )
    assert (
        checks["p2p"]["status"] == "warn" and "loopback only" in checks["p2p"]["detail"]
    )  # the default bind
    # the table: one row a check and a verdict
    table = workspace.cli("doctor", "--run", doctor_run)
    assert (
        table.exit_code == 0
        and table.output.splitlines()[-1] == "this machine can join run 'doctor-run'"
    )


def test_a_model_that_cannot_fit_under_the_memory_limit(workspace, doctor_run):
    code, checks = _doctor(workspace, "--run", doctor_run, "--memory-limit", "0.01")
    assert code == 11 and checks["memory"]["status"] == "fail"  # ExitCode.TOO_LITTLE_MEMORY
    assert (
        "cannot be trained here" in checks["memory"]["detail"]
        and "--memory-limit allows" in checks["memory"]["detail"]
    )
    table = workspace.cli("doctor", "--run", doctor_run, "--memory-limit", "0.01")
    assert table.exit_code == 11 and table.output.splitlines()[-1].startswith(
        "cannot join: memory: "
    )


def test_an_unreachable_rpc_a_missing_run_and_an_empty_wallet(workspace, doctor_run):
    code, checks = _doctor(workspace, "--run", doctor_run, "-u", f"http://127.0.0.1:{_free_port()}",
                           "--program-id", str(workspace.program_id))  # fmt: skip
    assert code == 8 and checks["rpc"]["status"] == "fail"  # ExitCode.RPC_UNREACHABLE
    assert checks["run"]["status"] == "skip" and checks["wallet"]["status"] == "skip"

    code, checks = _doctor(workspace, "--run", "no-such-run")
    assert code == 3 and "no run 'no-such-run'" in checks["run"]["detail"]  # ExitCode.RUN_NOT_FOUND

    empty = workspace.new_wallet("doctor-empty")
    code, checks = _doctor(workspace, "--run", doctor_run, "--wallet", str(empty))
    assert code == 7 and "holds 0.0000 SOL" in checks["wallet"]["detail"]  # ExitCode.UNFUNDED
