"""Malformed bytes on the wire of each transport: the node answers with an error or drops that
stream, and keeps serving everyone else."""

from __future__ import annotations

import asyncio
import os
import struct
import time

import aiohttp
from iroh import Endpoint, EndpointAddr, EndpointId, EndpointOptions, RelayMode, preset_minimal

from cohort.client.p2p import Allowlist, HttpTransport, IrohTransport, NodeKey, Status
from cohort.client.p2p.http_transport import H_FROM, H_SIGNATURE, H_TIME, signed_request_bytes
from cohort.client.p2p.iroh_transport import ALPN, IrohConfig


async def echo(peer, body, reply):
    await reply.write(body)


def frame(name: bytes, body: bytes, declared: int | None = None) -> bytes:
    return (
        bytes([len(name)])
        + name
        + struct.pack(">I", len(body) if declared is None else declared)
        + body
    )


async def test_iroh_malformed_frames(stack):
    server_key, raw_key, other_key = NodeKey.generate(), NodeKey.generate(), NodeKey.generate()
    allow = Allowlist([server_key.node_id, raw_key.node_id, other_key.node_id])
    server = IrohTransport(server_key, allow, IrohConfig(request_timeout=0.5))
    server.add_protocol("echo", echo, max_request=4096)
    await stack.enter_async_context(server)
    other = await stack.enter_async_context(IrohTransport(other_key, allow))

    raw = await Endpoint.bind(
        EndpointOptions(
            preset=preset_minimal(),
            relay_mode=RelayMode.disabled(),
            bind_addr="127.0.0.1:0",
            secret_key=raw_key.secret,
        )
    )
    stack.push_async_callback(raw.close)
    target = EndpointAddr(
        EndpointId.from_bytes(server.node_id.key), None, list(server.address.addrs)
    )
    conn = await asyncio.wait_for(raw.connect(target, ALPN), 5)

    async def send(data: bytes, *, finish: bool = True) -> bytes:
        bi = await conn.open_bi()
        await bi.send().write_all(data)
        if finish:
            await bi.send().finish()
        return await asyncio.wait_for(bi.recv().read_to_end(1 << 20), 5)

    cases = {
        b"": Status.BAD_REQUEST,
        bytes([0]): Status.BAD_REQUEST,  # zero-length protocol name
        bytes([200]) + b"x" * 10: Status.BAD_REQUEST,  # name length past the limit
        bytes([4]) + b"echo": Status.BAD_REQUEST,  # header cut short
        frame(b"echo", b"abc", declared=10): Status.BAD_REQUEST,  # length lies
        frame(b"echo", b"abc", declared=2): Status.BAD_REQUEST,
        frame(b"\xff\xfe", b""): Status.BAD_REQUEST,  # not ASCII
        frame(b"nope", b""): Status.UNKNOWN_PROTOCOL,
        frame(b"echo", b"x" * 5000): Status.TOO_LARGE,  # over the protocol's limit
        frame(b"echo", b"x" * 200_000): Status.TOO_LARGE,  # over any frame
        os.urandom(3000): None,  # garbage: some error status
    }
    for data, expected in cases.items():
        answer = await send(data)
        assert answer and answer[0] != Status.OK, data[:20]
        if expected is not None:
            assert answer[0] == expected, (data[:20], answer)

    started = time.monotonic()
    answer = await send(frame(b"echo", b"never finished"), finish=False)
    assert answer[0] == Status.BAD_REQUEST and time.monotonic() - started < 5

    bi = await conn.open_bi()  # a stream reset half way
    await bi.send().write_all(b"\x04ec")
    await bi.send().reset(7)

    assert await send(frame(b"echo", b"fine")) == bytes([Status.OK]) + b"fine"
    async with other.request(server.address, "echo", b"others too") as reply:
        assert await reply.read() == b"others too"


async def test_http_malformed_requests(stack):
    server_key, client_key, intruder = NodeKey.generate(), NodeKey.generate(), NodeKey.generate()
    server = HttpTransport(server_key, Allowlist([client_key.node_id]))
    server.add_protocol("echo", echo, max_request=4096)
    await stack.enter_async_context(server)
    session = await stack.enter_async_context(aiohttp.ClientSession())
    base = f"http://{server.address.addrs[0]}/cohort/p2p/"

    def auth(
        body: bytes, *, signer=client_key, responder=server_key, millis=None, claimed=client_key
    ):
        millis = int(time.time() * 1000) if millis is None else millis
        signed = signed_request_bytes(claimed.node_id, responder.node_id, "echo", millis, body)
        return {
            H_FROM: claimed.node_id.hex(),
            H_TIME: str(millis),
            H_SIGNATURE: signer.sign(signed).hex(),
        }

    async def post(path: str, body: bytes, headers: dict) -> tuple[int, str]:
        async with session.post(base + path, data=body, headers=headers) as resp:
            return resp.status, await resp.text()

    assert await post("echo", b"hi", auth(b"hi")) == (200, "hi")
    assert (await post("echo", b"hi", {}))[0] == 400  # no signature headers
    assert (await post("echo", b"hi", {**auth(b"hi"), H_FROM: "zz"}))[0] == 400
    assert (await post("echo", b"hi", {**auth(b"hi"), H_TIME: "soon"}))[0] == 400
    assert (await post("echo", b"hi", {**auth(b"hi"), H_SIGNATURE: "00"}))[0] == 400
    assert (await post("echo", b"hi", auth(b"hi", signer=intruder)))[0] == 403  # forged signature
    assert (await post("echo", b"hi", auth(b"hi", claimed=intruder, signer=intruder)))[0] == 403
    assert (await post("echo", b"hi", auth(b"hi", responder=intruder)))[
        0
    ] == 403  # signed for another node
    assert (await post("echo", b"hi", auth(b"hi", millis=1)))[0] == 403  # replayed long after
    assert (await post("echo", b"hi", auth(b"other body")))[0] == 403
    big = b"x" * 5000
    assert (await post("echo", big, auth(big)))[0] == 413

    async def chunked():
        for _ in range(5):
            yield b"y" * 1000

    assert (await post("echo", chunked(), auth(b"")))[0] == 413  # no length given, still capped
    assert (await post("no-such", b"", auth(b"")))[0] == 404
    assert (await post("bad%20name", b"", auth(b"")))[0] == 400
    async with session.get(base + "echo") as resp:
        assert resp.status == 405

    host, port = server.address.addrs[0].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(os.urandom(2000) + b"\r\n\r\n")
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(1000), 5)
    assert reply == b"" or reply.split(b"\r\n")[0].endswith(b" 400 Bad Request")
    writer.close()

    assert await post("echo", b"still here", auth(b"still here")) == (200, "still here")
