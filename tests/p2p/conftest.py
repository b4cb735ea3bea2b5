"""Shared fixtures: transports and nodes on 127.0.0.1 (both kinds), and peer processes."""

from __future__ import annotations

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
    Transport,
)
from cohort.client.p2p.peer_process import PeerProcess

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

        async def quiet_gossip() -> None:  # first stop every repair loop, so that no node dials
            for node in nodes:  # one already closed (iroh waits ~3 s for such a dial on close)
                await node.gossip.close()

        stack.push_async_callback(quiet_gossip)
        addresses = [node.address for node in nodes]
        for node in nodes:
            node.set_clients(addresses)
        return nodes

    return start


@pytest.fixture
def spawn_peer() -> Callable[..., PeerProcess]:
    """spawn_peer(kind, allow, *serve args) -> a serving peer process, killed after the test."""
    started: list[PeerProcess] = []

    def spawn(kind: str, allow: list[NodeId], *args: str) -> PeerProcess:
        peer = PeerProcess(kind, allow, *args)
        started.append(peer)
        return peer

    yield spawn
    for peer in started:
        peer.stop()
