"""iroh specifics: the bindings' process-wide event loop, and relay configuration."""

from __future__ import annotations

import asyncio
import threading

import pytest
from iroh import iroh_ffi

from cohort.client.p2p import Allowlist, IrohConfig, IrohTransport, NodeKey


async def echo(peer, body, reply):
    await reply.write(body)


async def test_event_loop_is_bound_while_endpoints_are_open():
    a = IrohTransport(NodeKey.generate(), Allowlist())
    b = IrohTransport(NodeKey.generate(), Allowlist())
    await a.start()
    await b.start()
    assert iroh_ffi._UNIFFI_GLOBAL_EVENT_LOOP is asyncio.get_running_loop()
    await a.close()
    assert iroh_ffi._UNIFFI_GLOBAL_EVENT_LOOP is asyncio.get_running_loop()  # b still open
    await b.close()
    assert iroh_ffi._UNIFFI_GLOBAL_EVENT_LOOP is None


async def test_a_second_running_loop_is_refused():
    async with IrohTransport(NodeKey.generate(), Allowlist()):
        errors = []

        def other_thread():
            async def start_there():
                await IrohTransport(NodeKey.generate(), Allowlist()).start()

            try:
                asyncio.run(start_there())
            except RuntimeError as e:
                errors.append(str(e))

        thread = threading.Thread(target=other_thread)
        thread.start()
        await asyncio.to_thread(thread.join, 30)
        assert errors and "one asyncio loop per process" in errors[0]


def test_a_loop_left_behind_is_replaced():
    async def leave_open():
        await IrohTransport(NodeKey.generate(), Allowlist()).start()  # never closed

    async def start_again():
        async with IrohTransport(NodeKey.generate(), Allowlist()) as t:
            assert t.address.addrs

    asyncio.run(leave_open())
    asyncio.run(start_again())
    assert iroh_ffi._UNIFFI_GLOBAL_EVENT_LOOP is None


async def test_custom_relays_keep_direct_addresses_working(stack):
    a_key, b_key = NodeKey.generate(), NodeKey.generate()
    allow = Allowlist([a_key.node_id, b_key.node_id])
    config = IrohConfig(relay_urls=("http://127.0.0.1:9",))  # a relay that is not there
    a = IrohTransport(a_key, allow, config)
    a.add_protocol("echo", echo, max_request=16)
    await stack.enter_async_context(a)
    b = await stack.enter_async_context(IrohTransport(b_key, allow, config))
    async with b.request(a.address, "echo", b"direct") as reply:
        assert await reply.read() == b"direct"


def test_config_validation():
    assert IrohConfig().relay_urls == ()  # relays are off unless asked for
    with pytest.raises(ValueError, match="https://"):
        IrohConfig(relay_urls=("relay.example.org",))
    with pytest.raises(TypeError, match="tuple"):
        IrohConfig(relay_urls="https://relay.example.org")
    with pytest.raises(ValueError, match="not both"):
        IrohConfig(relay_urls=("https://relay.example.org",), default_relays=True)
    with pytest.raises(ValueError, match="port"):
        IrohConfig(port=70000)
    assert IrohConfig(bind_host="::1").bind_addr() == "[::1]:0"
