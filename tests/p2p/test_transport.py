"""The transport contract, run against both implementations (iroh and HTTP) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

import pytest

from cohort.client.p2p import (
    Allowlist,
    NodeKey,
    PeerAddress,
    PeerRejected,
    PeerUnreachable,
    RemoteError,
    RequestRejected,
    Status,
    StreamBroken,
)


async def echo(peer, body, reply):
    await reply.write(body)


async def whoami(peer, body, reply):
    await reply.write(peer.key)


async def big(peer, body, reply):
    size = int(body)
    block = bytes(range(256)) * 4096  # 1 MiB
    for offset in range(0, size, len(block)):
        await reply.write(block[: size - offset])


async def refuse(peer, body, reply):
    raise RequestRejected(Status.NOT_FOUND, "nothing here")


async def fail_midway(peer, body, reply):
    await reply.write(b"partial answer")
    raise RuntimeError("handler crashed after answering")


TEST_PROTOCOLS = {
    "echo": (echo, 4096),
    "whoami": (whoami, 0),
    "big": (big, 16),
    "refuse": (refuse, 16),
    "fail": (fail_midway, 16),
}


async def read_all(reply) -> bytes:
    out = bytearray()
    for _ in range(100_000):
        chunk = await reply.read()
        if not chunk:
            return bytes(out)
        out += chunk
    raise AssertionError("reply never ended")


async def pair(make_transport):
    server_key, client_key = NodeKey.generate(), NodeKey.generate()
    allowlist = Allowlist([server_key.node_id, client_key.node_id])
    server = await make_transport(server_key, allowlist, TEST_PROTOCOLS)
    client = await make_transport(client_key, Allowlist([server_key.node_id]))
    return server, client


async def test_request_reply_carries_the_authenticated_requester(make_transport):
    server, client = await pair(make_transport)
    async with client.request(server.address, "echo", b"hello") as reply:
        assert await read_all(reply) == b"hello"
    async with client.request(server.address, "whoami", b"") as reply:
        assert await read_all(reply) == client.node_id.key
    async with client.request(server.address, "big", b"9000000") as reply:
        data = await read_all(reply)
    assert len(data) == 9_000_000 and data[:256] == bytes(range(256))
    assert server.stats.requests_served == 3


async def test_error_statuses(make_transport):
    server, client = await pair(make_transport)
    with pytest.raises(RemoteError) as e:
        async with client.request(server.address, "refuse", b""):
            pass
    assert e.value.status == Status.NOT_FOUND and "nothing here" in e.value.message
    with pytest.raises(RemoteError) as e:
        async with client.request(server.address, "no/such/protocol", b""):
            pass
    assert e.value.status == Status.UNKNOWN_PROTOCOL
    with pytest.raises(RemoteError) as e:
        async with client.request(server.address, "echo", b"x" * 4097):
            pass
    assert e.value.status == Status.TOO_LARGE
    async with client.request(server.address, "echo", b"still serving") as reply:
        assert await read_all(reply) == b"still serving"


async def test_handler_failure_after_writing_cuts_the_stream(make_transport):
    server, client = await pair(make_transport)
    with pytest.raises(StreamBroken):
        async with client.request(server.address, "fail", b"") as reply:
            await read_all(reply)
    async with client.request(server.address, "echo", b"next") as reply:
        assert await read_all(reply) == b"next"


async def test_intruder_key_is_rejected(make_transport):
    server, client = await pair(make_transport)
    intruder = await make_transport(NodeKey.generate(), Allowlist([server.node_id]))
    with pytest.raises(PeerRejected):
        async with intruder.request(server.address, "echo", b"let me in"):
            pass
    assert server.stats.requests_refused >= 1
    async with client.request(server.address, "echo", b"member") as reply:
        assert await read_all(reply) == b"member"


async def test_allowlist_is_updated_in_place(make_transport):
    server, client = await pair(make_transport)
    async with client.request(server.address, "echo", b"1") as reply:
        assert await read_all(reply) == b"1"
    server.allowlist.replace(
        [server.node_id]
    )  # new epoch without the client: its open connection too
    with pytest.raises(PeerRejected):
        async with client.request(server.address, "echo", b"2"):
            pass
    server.allowlist.replace([server.node_id, client.node_id])
    async with client.request(server.address, "echo", b"3") as reply:
        assert await read_all(reply) == b"3"


async def test_dead_peer_fails_within_the_open_timeout(make_transport):
    _, client = await pair(make_transport)
    gone = await make_transport(NodeKey.generate(), Allowlist())
    dead = gone.address
    await gone.close()
    started = time.monotonic()
    with pytest.raises(PeerUnreachable):
        async with client.request(dead, "echo", b"anyone?", open_timeout=1.0):
            pass
    assert time.monotonic() - started < 5  # not QUIC's 30 s idle timeout


@pytest.mark.parametrize("kind", ["iroh"])
async def test_a_slow_answer_keeps_the_connection_a_silent_one_drops_it(make_transport):
    """A peer whose process is slow still acknowledges what we sent: its connection is kept (redialling
    would only add a handshake to its load); one that heard nothing since is dropped and redialled."""

    async def slow(peer, body, reply):
        await asyncio.sleep(2)
        await reply.write(b"late")

    key, client_key = NodeKey.generate(), NodeKey.generate()
    server = await make_transport(
        key, Allowlist([client_key.node_id]), {"slow": (slow, 0), "echo": (echo, 64)}
    )
    client = await make_transport(client_key, Allowlist([key.node_id]))
    async with client.request(server.address, "echo", b"hello") as reply:
        assert await read_all(reply) == b"hello"
    with pytest.raises(PeerUnreachable):
        async with client.request(server.address, "slow", b"", open_timeout=0.5):
            pass
    async with client.request(server.address, "echo", b"again") as reply:
        assert await read_all(reply) == b"again"
    assert client.stats.dials == 1
    await client.stalled(key.node_id, client.liveness(key.node_id))  # nothing heard since the mark
    async with client.request(server.address, "echo", b"redialled") as reply:
        assert await read_all(reply) == b"redialled"
    assert client.stats.dials == 2


async def test_a_stalled_read_can_be_abandoned(make_transport):
    """The reader's own deadline, then leaving the request block, frees the stream."""

    async def slow(peer, body, reply):
        await reply.write(b"first")
        await asyncio.sleep(30)

    key = NodeKey.generate()
    client_key = NodeKey.generate()
    server = await make_transport(key, Allowlist([client_key.node_id]), {"slow": (slow, 0)})
    client = await make_transport(client_key, Allowlist([key.node_id]))
    async with client.request(server.address, "slow", b"") as reply:
        assert await reply.read() == b"first"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await reply.read()


async def test_bad_arguments_are_refused(make_transport):
    server, client = await pair(make_transport)
    with pytest.raises(TypeError, match="PeerAddress"):
        async with client.request(server.address.node_id, "echo", b""):
            pass
    with pytest.raises(ValueError, match="protocol name"):
        async with client.request(server.address, "bad name!", b""):
            pass
    with pytest.raises(TypeError, match="bytes"):
        async with client.request(server.address, "echo", "text"):
            pass
    with pytest.raises(ValueError, match="host:port"):
        PeerAddress(server.node_id, ("localhost",))
    with pytest.raises(TypeError, match="tuple"):
        PeerAddress(server.node_id, "127.0.0.1:1")
    with pytest.raises(ValueError, match="already registered"):
        server.add_protocol("echo", echo, max_request=1)
