"""The zygote that forks `cohort` processes from one that imported the client once (LocalRun's
fork_clients, for runs of many clients): children run the CLI with their own arguments, environment and
log, their exit statuses come back, and a malformed request is refused without stopping the zygote."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from cohort.client.runtime.local_run import free_port_pair
from cohort.client.runtime.zygote import Zygote


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(str(tmp_path_factory.mktemp("zygote") / "zygote.log"))
    yield z
    z.close()


def test_a_forked_child_runs_the_cli_in_its_own_process_group_and_reports_its_exit(
    zygote, tmp_path: Path
):
    log = tmp_path / "help.log"
    child = zygote.start(["--help"], {"PATH": os.environ.get("PATH", "")}, str(log))
    assert child.wait(60) == 0 and child.poll() == 0
    assert "Usage" in log.read_text()
    bad = zygote.start(["no-such-command"], {}, str(tmp_path / "bad.log"))
    assert bad.wait(60) == 2 and "No such command" in (tmp_path / "bad.log").read_text()


def test_a_malformed_request_is_refused_and_the_zygote_goes_on(zygote, tmp_path: Path):
    stdin = zygote.process.stdin
    assert stdin is not None
    with zygote._lock:
        stdin.write(b'{"argv": "not a list", "env": {}, "log": "x"}\n')
        stdin.flush()
        assert zygote._answered.wait_for(lambda: zygote._answers, 30)
        assert "argv" in zygote._answers.pop(0)
    with pytest.raises(RuntimeError, match="log"):
        zygote.start(["--help"], {}, "")
    child = zygote.start(["--help"], {}, str(tmp_path / "after.log"))
    assert child.wait(60) == 0


def test_a_long_running_child_is_stopped_by_its_process_group(zygote, tmp_path: Path):
    child = zygote.start(["localnet", "start", "--port", str(free_port_pair()), "--ledger", str(tmp_path / "ledger")],
                         {"PATH": os.environ.get("PATH", "")}, str(tmp_path / "localnet.log"))  # fmt: skip
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(2)
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(30) == -signal.SIGKILL


def test_a_child_that_outlives_its_zygote_is_still_followed(tmp_path: Path):
    zygote = Zygote(str(tmp_path / "zygote.log"))
    child = zygote.start(["localnet", "start", "--port", str(free_port_pair()), "--ledger", str(tmp_path / "ledger")],
                         {"PATH": os.environ.get("PATH", "")}, str(tmp_path / "localnet.log"))  # fmt: skip
    zygote.process.kill()
    zygote.close()
    assert child.poll() is None  # still running, now without the zygote
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(30) == -1  # gone; its status went with the zygote
