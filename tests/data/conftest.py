"""Prepared data sets and real servers (HTTP static files, `cohort data serve`) on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cohort.client.data import ByteTokenizer, prepare

HERE = Path(__file__).parent
COHORT = str(Path(sys.executable).parent / "cohort")


@pytest.fixture(scope="session")
def kjv_dir(tmp_path_factory) -> Path:
    """The KJV as bytes, in shards of 1M tokens (sequences cross shard ends)."""
    out = tmp_path_factory.mktemp("prepared") / "kjv"
    prepare("kjv", ByteTokenizer(), out, shard_tokens=1 << 20)
    return out


class Server:
    """A child process that prints its address on its first line; stopped by pid."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline().strip()
        if not line:
            self.stop()
            raise RuntimeError(f"server did not start: {self.proc.stderr.read()[-2000:]}")
        self.first_line = line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def start_server() -> Callable[[list[str]], Server]:
    started: list[Server] = []

    def start(args: list[str]) -> Server:
        server = Server(args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def http_url(kjv_dir, start_server) -> str:
    """kjv_dir's parent served over HTTP; the URL of the prepared directory."""
    server = start_server([sys.executable, str(HERE / "static_server.py"), str(kjv_dir.parent)])
    return f"{server.first_line}/{kjv_dir.name}"


@pytest.fixture
def tcp_location(kjv_dir, start_server) -> str:
    server = start_server([COHORT, "data", "serve", str(kjv_dir)])
    return server.first_line.rsplit(" at ", 1)[1]
