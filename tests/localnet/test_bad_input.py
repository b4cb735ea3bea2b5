"""Bad input gets the standard JSON-RPC error, never a crash or a hung connection (raw aiohttp client)."""

from __future__ import annotations

import asyncio
import base64

import aiohttp
import pytest

TIMEOUT = aiohttp.ClientTimeout(total=10)


async def post(url: str, body: bytes | str, headers: dict | None = None) -> tuple[int, object]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.post(
            url, data=body, headers={"Content-Type": "application/json", **(headers or {})}
        ) as r:
            return r.status, await r.json(content_type=None)


def call(method: str, params: object = None, request_id: int = 1) -> str:
    import json

    request = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = params
    return json.dumps(request)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("{not json", -32700),
        ("5", -32600),
        ("[]", -32600),
        ('{"id": 1, "method": "getSlot"}', -32600),
        (call("noSuchMethod"), -32601),
        (call("getTransactionsForAddress", ["11111111111111111111111111111111"]), -32601),
        (call("getBalance", [123]), -32602),
        (call("getBalance", ["not-a-key"]), -32602),
        (call("getBalance", {"pubkey": "x"}), -32602),
        (call("getBalance", ["11111111111111111111111111111111", "finalized"]), -32602),
        (call("getBalance", ["11111111111111111111111111111111", {"commitment": "soon"}]), -32602),
        (call("getAccountInfo", ["11111111111111111111111111111111", {"encoding": "hex"}]), -32602),
        (call("getMultipleAccounts", [["11111111111111111111111111111111"] * 101]), -32602),
        (
            call(
                "getProgramAccounts",
                [
                    "11111111111111111111111111111111",
                    {"filters": [{"memcmp": {"offset": -1, "bytes": "1"}}]},
                ],
            ),
            -32602,
        ),
        (call("getSignatureStatuses", ["not-a-list"]), -32602),
        (call("getBlock", [-5]), -32602),
        (call("requestAirdrop", ["11111111111111111111111111111111", "lots"]), -32602),
        (call("sendTransaction", ["!!!not base64!!!", {"encoding": "base64"}]), -32602),
        (
            call(
                "sendTransaction", [base64.b64encode(b"\x01" * 40).decode(), {"encoding": "base64"}]
            ),
            -32602,
        ),
        (call("sendTransaction", ["A" * 2000, {"encoding": "base64"}]), -32602),
        (call("sendTransaction", ["abc", {"encoding": "hex"}]), -32602),
        (call("sendTransaction", [12]), -32602),
        (call("getSlot", [{"minContextSlot": 10**12}]), -32016),
        (
            call("localnet_setAccount", ["11111111111111111111111111111111", {"lamports": -1}]),
            -32602,
        ),
    ],
)
async def test_bad_requests_get_standard_errors(localnet, body: str, code: int) -> None:
    status, response = await post(localnet.http_url, body)
    assert status == 200
    assert response["jsonrpc"] == "2.0" and response["error"]["code"] == code, response
    assert response["error"]["message"]
    # and the server is still fine
    status, response = await post(localnet.http_url, call("getHealth"))
    assert response["result"] == "ok"


async def test_batches_answer_each_request_in_order(localnet) -> None:
    body = (
        "["
        + ",".join(
            [
                call("getHealth", request_id=1),
                call("nope", request_id=2),
                "7",
                call("getSlot", request_id=4),
            ]
        )
        + "]"
    )
    status, response = await post(localnet.http_url, body)
    assert status == 200 and [r.get("id") for r in response] == [1, 2, None, 4]
    assert response[0]["result"] == "ok" and response[1]["error"]["code"] == -32601
    assert response[2]["error"]["code"] == -32600 and isinstance(response[3]["result"], int)


async def test_oversized_requests_are_refused_with_an_error(localnet) -> None:
    big = call("getHealth", ["x" * (1024 * 1024 + 10)])
    status, response = await post(localnet.http_url, big)
    assert (
        status == 413
        and response["error"]["code"] == -32600
        and "too large" in response["error"]["message"]
    )

    async def chunked():
        for _ in range(40):
            yield b"x" * 32768

    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(localnet.http_url, data=chunked()) as r,
    ):
        assert r.status == 413 and (await r.json(content_type=None))["error"]["code"] == -32600
    status, response = await post(localnet.http_url, call("getHealth"))
    assert response["result"] == "ok"


async def test_fake_gzip_header_and_cors(localnet) -> None:
    # anchorpy sends `content-encoding: gzip` with a plain body
    _, response = await post(localnet.http_url, call("getHealth"), {"Content-Encoding": "gzip"})
    assert response["result"] == "ok"
    headers = {
        "Origin": "https://explorer.solana.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,solana-client",
        "Access-Control-Request-Private-Network": "true",
    }
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.options(localnet.http_url, headers=headers) as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == "https://explorer.solana.com"
            assert r.headers["Access-Control-Allow-Headers"] == "content-type,solana-client"
            assert r.headers["Access-Control-Allow-Private-Network"] == "true"
        async with session.post(
            localnet.http_url,
            data=call("getGenesisHash"),
            headers={"Origin": "https://explorer.solana.com"},
        ) as r:
            assert r.headers["Access-Control-Allow-Origin"] == "https://explorer.solana.com"


async def test_websocket_bad_messages_keep_the_connection(localnet) -> None:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.ws_connect(localnet.ws_url) as ws,
    ):
        for text, code in [
            ("{oops", -32700),
            (call("getSlot"), -32601),
            (call("accountSubscribe", ["nope"]), -32602),
            (call("logsSubscribe", [{"mentions": []}]), -32602),
            (call("slotUnsubscribe", [424242]), -32602),
        ]:
            await ws.send_str(text)
            reply = await asyncio.wait_for(ws.receive_json(), 5)
            assert reply["error"]["code"] == code, reply
        await ws.send_str(call("slotSubscribe"))
        assert isinstance((await asyncio.wait_for(ws.receive_json(), 5))["result"], int)
