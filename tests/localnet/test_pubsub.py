"""Websocket subscriptions through solana-py's SolanaWsClient (and raw aiohttp for slot/root)."""

from __future__ import annotations

import asyncio

import aiohttp
from solana.rpc.async_api import AsyncClient
from solana.rpc.models import TxOpts
from solana.rpc.websocket_api import SolanaWsClient
from solders.keypair import Keypair
from solders.rpc.config import RpcTransactionLogsFilterMentions
from solders.system_program import TransferParams, transfer

SOL = 1_000_000_000


async def next_notification(ws: SolanaWsClient):
    return await asyncio.wait_for(ws.recv(), 5)


async def test_signature_logs_and_account_notifications(
    localnet, chain, client: AsyncClient, payer: Keypair
) -> None:
    to = Keypair().pubkey()
    async with SolanaWsClient(localnet.ws_url) as ws:
        account_sub = await ws.account_subscribe(pubkey=to)
        logs_sub = await ws.logs_subscribe(filter_=RpcTransactionLogsFilterMentions(to))
        blockhash = (await client.get_latest_blockhash()).value.blockhash
        tx = chain.sign(
            payer,
            [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=SOL))],
            blockhash,
        )
        signature_sub = await ws.signature_subscribe(signature=tx.signatures[0])
        await client.send_transaction(tx, opts=TxOpts(skip_confirmation=True))
        seen = {}
        for _ in range(3):
            notification = await next_notification(ws)
            seen[type(notification).__name__] = notification
        assert seen["AccountNotification"].result.value.lamports == SOL
        logs = seen["LogsNotification"].result.value
        assert logs.signature == tx.signatures[0] and logs.err is None
        assert logs.logs[-1] == "Program 11111111111111111111111111111111 success"
        assert seen["SignatureNotification"].result.value.err is None
        await ws.unsubscribe(account_sub)
        await ws.unsubscribe(logs_sub)
        assert signature_sub.subscription_id > 0


async def test_signature_subscribe_after_landing_notifies_at_once(
    localnet, client: AsyncClient, payer: Keypair
) -> None:
    signature = (await client.request_airdrop(payer.pubkey(), SOL)).value
    async with SolanaWsClient(localnet.ws_url) as ws:
        await ws.signature_subscribe(signature=signature)
        notification = await next_notification(ws)
        assert notification.result.value.err is None


async def test_slot_root_and_program_subscriptions_over_raw_websocket(localnet, chain) -> None:
    program = Keypair().pubkey()
    account = Keypair().pubkey()
    async with aiohttp.ClientSession() as session, session.ws_connect(localnet.ws_url) as ws:
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "slotSubscribe"},
            {"jsonrpc": "2.0", "id": 2, "method": "rootSubscribe"},
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "programSubscribe",
                "params": [str(program), {"encoding": "base64", "filters": [{"dataSize": 4}]}],
            },
        ]
        ids = {}
        for request in requests:
            await ws.send_json(request)
            reply = await asyncio.wait_for(ws.receive_json(), 5)
            ids[reply["id"]] = reply["result"]
        await chain.set_account(account, program, b"\x01\x02\x03\x04")
        await chain.set_account(Keypair().pubkey(), program, b"\x01")  # filtered out by dataSize
        kinds = {}
        for _ in range(20):  # slots tick every 400 ms: bounded wait for one of each kind
            message = await asyncio.wait_for(ws.receive_json(), 5)
            kinds.setdefault(message["method"], message["params"])
            if len(kinds) == 3:
                break
        assert kinds["programNotification"]["subscription"] == ids[3]
        assert kinds["programNotification"]["result"]["value"]["pubkey"] == str(account)
        assert kinds["programNotification"]["result"]["value"]["account"]["data"] == [
            "AQIDBA==",
            "base64",
        ]
        slot = kinds["slotNotification"]["result"]
        assert slot["slot"] > slot["parent"]
        assert isinstance(kinds["rootNotification"]["result"], int)
        await ws.send_json(
            {"jsonrpc": "2.0", "id": 4, "method": "slotUnsubscribe", "params": [ids[1]]}
        )
        await ws.send_json(
            {"jsonrpc": "2.0", "id": 5, "method": "slotUnsubscribe", "params": [ids[1]]}
        )
        replies = {}
        for _ in range(20):
            message = await asyncio.wait_for(ws.receive_json(), 5)
            if "id" in message:
                replies[message["id"]] = message
            if len(replies) == 2:
                break
        assert replies[4]["result"] is True
        assert replies[5]["error"]["code"] == -32602
