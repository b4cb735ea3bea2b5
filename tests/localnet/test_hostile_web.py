"""A web page the developer opens is the attacker: cheats, cross-origin posts, forged Host headers,
websockets from other sites, subscription and history growth, and listening beyond loopback."""

from __future__ import annotations

import asyncio
import base64
import json
import socket

import aiohttp
import pytest
from click.testing import CliRunner
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair

from cohort.localnet.cli import localnet as localnet_cli
from cohort.localnet.config import EXPLORER_ORIGIN, LocalnetConfig, exposure_warning, is_loopback
from cohort.localnet.server import Localnet, host_name

TIMEOUT = aiohttp.ClientTimeout(total=10)
EVIL = "https://evil.example"
SYSTEM = "11111111111111111111111111111111"


def body(method: str, *params) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})


async def post(url: str, text: str, headers: dict | None = None) -> tuple[int, dict, str]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(
            url, data=text, headers={"Content-Type": "text/plain", **(headers or {})}
        ) as r,
    ):
        return r.status, dict(r.headers), await r.text()


async def rpc(url: str, method: str, *params):
    status, _, text = await post(url, body(method, *params))
    assert status == 200, text
    return json.loads(text)


async def balance(url: str, key: str) -> int:
    return (await rpc(url, "getBalance", key))["result"]["value"]


async def test_cheats_are_off_unless_asked_for():
    async with Localnet(LocalnetConfig(port=0)) as net:
        for method, params in (
            ("localnet_warpTime", [3600]),
            ("localnet_setAccount", [SYSTEM, {"lamports": 5}]),
            ("localnet_snapshot", []),
        ):
            error = (await rpc(net.http_url, method, *params))["error"]
            assert error["code"] == -32601 and "--cheats" in error["message"]
        assert (await rpc(net.http_url, "getHealth"))["result"] == "ok"


async def test_pages_of_other_origins_and_forged_hosts_change_nothing():
    async with Localnet(LocalnetConfig(port=0, cheats=True)) as net:
        url = net.http_url
        victim = str(Keypair().pubkey())
        slot = (await rpc(url, "getSlot"))["result"]
        # what a page at evil.example can send without a preflight: a text/plain POST
        status, headers, text = await post(url, body("localnet_warpTime", 3600), {"Origin": EVIL})
        assert status == 403 and "--cors-origin" in text
        assert "Access-Control-Allow-Origin" not in headers
        assert (await rpc(url, "getSlot"))["result"] < slot + 100  # the clock did not move
        # DNS rebinding: the page's own name resolves to 127.0.0.1, so the Host header is its name
        spec = {"lamports": 10**15, "owner": SYSTEM}
        forged = {"Host": f"evil.example:{net.port}"}
        status, _, text = await post(url, body("localnet_setAccount", victim, spec), forged)
        assert status == 403 and "Host" in text
        assert await balance(url, victim) == 0
        status, _, _ = await post(url, body("getSlot"), {"Origin": "null"})  # sandboxed frames
        assert status == 403
        # the Explorer may, with CORS headers naming it; clients outside a browser send no Origin
        status, headers, _ = await post(url, body("getSlot"), {"Origin": EXPLORER_ORIGIN})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == EXPLORER_ORIGIN
        for host in ("localhost", "127.0.0.1", f"LOCALHOST:{net.port}", f"127.0.0.1:{net.port}"):
            status, _, _ = await post(url, body("getSlot"), {"Host": host})
            assert status == 200, host
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            preflight = {"Origin": EVIL, "Access-Control-Request-Method": "POST"}
            async with session.options(url, headers=preflight) as r:
                assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:  # no CORS for sockets
                await session.ws_connect(net.ws_url, origin=EVIL)
            assert refused.value.status == 403
            async with session.ws_connect(net.ws_url, origin=EXPLORER_ORIGIN) as ws:
                await ws.send_str(body("slotSubscribe"))
                assert isinstance((await ws.receive_json(timeout=5))["result"], int)


async def test_configured_origins_are_allowed():
    app = "http://localhost:3000"
    config = LocalnetConfig(port=0, cors_origins=(EXPLORER_ORIGIN, app + "/"))
    async with Localnet(config) as net:
        status, headers, _ = await post(net.http_url, body("getSlot"), {"Origin": app})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == app
        status, _, _ = await post(net.http_url, body("getSlot"), {"Origin": EVIL})
        assert status == 403
    with pytest.raises(ValueError, match="CORS origin"):
        LocalnetConfig(cors_origins=("evil.example",))
    result = CliRunner().invoke(localnet_cli, ["start", "--port", "0", "--cors-origin", "ftp://x"])
    assert result.exit_code == 2 and "CORS origin" in result.output


async def test_subscriptions_per_connection_are_capped():
    async with (
        Localnet(LocalnetConfig(port=0, max_subscriptions=3)) as net,
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.ws_connect(net.ws_url) as ws,
    ):
        ids = []
        for _ in range(3):
            await ws.send_str(body("accountSubscribe", SYSTEM))
            ids.append((await ws.receive_json(timeout=5))["result"])
        await ws.send_str(body("slotSubscribe"))
        error = (await ws.receive_json(timeout=5))["error"]
        assert error["code"] == -32602 and "Too many subscriptions" in error["message"]
        await ws.send_str(body("accountUnsubscribe", ids[0]))
        assert (await ws.receive_json(timeout=5))["result"] is True
        await ws.send_str(body("slotSubscribe"))
        assert isinstance((await ws.receive_json(timeout=5))["result"], int)
        async with session.ws_connect(net.ws_url) as other:  # the cap is per connection
            await other.send_str(body("slotSubscribe"))
            assert isinstance((await other.receive_json(timeout=5))["result"], int)


async def test_history_is_bounded_once_blockhashes_expire():
    async with (
        Localnet(LocalnetConfig(port=0, cheats=True, max_history=4)) as net,
        AsyncClient(net.http_url) as client,
    ):

        async def airdrop() -> str:
            signature = (await client.request_airdrop(Keypair().pubkey(), 10**9)).value
            await asyncio.wait_for(client.confirm_transaction(signature), 10)
            return str(signature)

        early = [await airdrop() for _ in range(6)]
        found = (await rpc(net.http_url, "getSignatureStatuses", early))["result"]["value"]
        early_slots = [status["slot"] for status in found]
        assert len(net.node.bank.history) == 6  # still replayable: nothing is forgotten yet
        await rpc(net.http_url, "localnet_warpTime", 120)  # 300 slots: their blockhashes expired
        late = [await airdrop() for _ in range(2)]
        history = net.node.bank.history
        assert len(history) == 4 and all(s in history for s in late)
        statuses = (await rpc(net.http_url, "getSignatureStatuses", early[:2]))["result"]["value"]
        assert statuses == [None, None]
        kept = (await rpc(net.http_url, "getSignatureStatuses", [early[-1]]))["result"]
        assert kept["value"][0] is not None  # the newest early ones are still held
        for slot in (early_slots[0], early_slots[-1]):  # blocks answer for what they still hold
            block = await rpc(net.http_url, "getBlock", slot, {"maxSupportedTransactionVersion": 0})
            assert block.get("error", {}).get("code") != -32603, block


def test_listening_beyond_loopback_is_warned_about():
    assert exposure_warning(LocalnetConfig()) is None
    assert exposure_warning(LocalnetConfig(host="::1")) is None
    assert exposure_warning(LocalnetConfig(host="localhost")) is None
    warning = exposure_warning(LocalnetConfig(host="0.0.0.0", cheats=True))
    assert warning is not None and "NOT LOOPBACK" in warning and "--cheats" in warning
    assert not is_loopback("192.168.1.10") and not is_loopback("::") and is_loopback("127.0.0.5")
    assert host_name("[::1]:8899") == "::1" and host_name("Localhost:80") == "localhost"
    assert host_name("evil.example") == "evil.example"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
async def test_ipv6_loopback():
    async with Localnet(LocalnetConfig(host="::1", port=0, cheats=True)) as net:
        assert net.http_url.startswith("http://[::1]:")
        async with AsyncClient(net.http_url) as client:
            key = Keypair().pubkey()
            signature = (await client.request_airdrop(key, 10**9)).value
            await asyncio.wait_for(client.confirm_transaction(signature), 10)
            assert (await client.get_balance(key)).value == 10**9
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.ws_connect(net.ws_url) as ws,
        ):
            await ws.send_str(body("slotSubscribe"))
            assert isinstance((await ws.receive_json(timeout=5))["result"], int)
        spec = {"lamports": 7, "owner": SYSTEM, "data": [base64.b64encode(b"").decode(), "base64"]}
        assert (await rpc(net.http_url, "localnet_setAccount", str(key), spec))["result"] is True
