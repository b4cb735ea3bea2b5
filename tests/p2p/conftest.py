"""Shared fixtures: transports and nodes on 127.0.0.1 (both kinds), and peer processes."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

import pytest

from cohort.client.p2p import (
    Allowlist,
    HttpTransport,
    IrohTransport,
    NodeId,
    NodeKey,
    P2PNode,
    PeerAddress,
    Transport,
)

KINDS = ("iroh", "http")


def new_transport(kind: str, key: NodeKey, allowlist: Allowlist) -> Transport:
    return IrohTransport(key, allowlist) if kind == "iroh" else HttpTransport(key, allowlist)


@pytest.fixture
def make_transport(kind: str, stack: AsyncExitStack) -> Callable:
    """make_transport(key, allowlist, protocols={name: (handler, max_request)}) -> started transport."""

    async def make(key: NodeKey, allowlist: Allowlist, protocols: dict | None = None) -> Transport:
        transport = new_transport(kind, key, allowlist)
        for name, (handler, max_request) in (protocols or {}).items():
            transport.add_protocol(name, handler, max_request=max_request)
        return await stack.enter_async_context(transport)

    return make


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    """Everything entered here (transports, nodes) is closed when the test ends, pass or fail."""
    async with AsyncExitStack() as s:
        yield s


@pytest.fixture
def start_nodes(kind: str, stack: AsyncExitStack) -> Callable:
    """start_nodes(n, **P2PNode kwargs) -> n started nodes that all know each other."""

    async def start(n: int, *, run_id: str = "test-run", **kwargs) -> list[P2PNode]:
        keys = [NodeKey.generate() for _ in range(n)]
        nodes = [P2PNode(new_transport(kind, k, Allowlist()), run_id, **kwargs) for k in keys]
        for node in nodes:
            await stack.enter_async_context(node)
        addresses = [node.address for node in nodes]
        for node in nodes:
            node.set_clients(addresses)
        return nodes

    return start


class PeerProcess:
    """`python -m cohort.client.p2p serve` in its own process, killed at the end of the test."""

    def __init__(self, proc: subprocess.Popen, info: dict) -> None:
        self.proc = proc
        self.address = PeerAddress(NodeId.from_hex(info["node_id"]), tuple(info["addrs"]))
        self.blobs = [bytes.fromhex(b) for b in info["blobs"]]
        self.manifests = [bytes.fromhex(m) for m in info["manifests"]]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def spawn_peer() -> Callable[..., PeerProcess]:
    started: list[PeerProcess] = []

    def spawn(
        kind: str, allow: list[NodeId], *args: str, ready_timeout: float = 30.0
    ) -> PeerProcess:
        cmd = [
            sys.executable,
            "-m",
            "cohort.client.p2p",
            "serve",
            "--transport",
            kind,
            "--stdin-lifeline",
        ]
        for node_id in allow:
            cmd += ["--allow", node_id.hex()]
        errors = tempfile.TemporaryFile()  # a file, not a pipe: a chatty child never blocks on it
        proc = subprocess.Popen(
            [*cmd, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors
        )
        deadline = time.monotonic() + ready_timeout
        line = b""
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                byte = os.read(proc.stdout.fileno(), 4096)
                if not byte:
                    break
                line += byte
        if not line.endswith(b"\n"):
            proc.kill()
            proc.wait(timeout=10)
            errors.seek(0)
            raise RuntimeError(f"peer process did not start: {errors.read().decode()[-2000:]}")
        peer = PeerProcess(proc, json.loads(line))
        started.append(peer)
        return peer

    yield spawn
    for peer in started:
        peer.kill()
        peer.proc.stdin.close()
        peer.proc.stdout.close()
