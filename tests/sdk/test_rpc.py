"""The RPC layer: fallback to the next URL, retries of transient failures, a clear error when nothing
answers, and program failures carrying the IDL error, the rule and the logs."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web
from solders.keypair import Keypair

from cohort.sdk.client import RunClient
from cohort.sdk.errors import ProgramError, RpcUnavailable
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file

DEAD = "http://127.0.0.1:9"


async def test_falls_back_to_the_next_url(workspace):
    async with Rpc([DEAD, workspace.localnet.net.http_url], backoff=0.01) as rpc:
        assert await rpc.balance(workspace.wallet.pubkey()) > 0
        assert rpc.url == workspace.localnet.net.http_url  # the next call starts there


async def test_transient_http_errors_are_retried(workspace):
    """A proxy that answers 503 to the first two requests, then forwards to the localnet."""
    failures = 2

    async def handle(request: web.Request) -> web.Response:
        nonlocal failures
        if failures:
            failures -= 1
            return web.Response(status=503, text="busy")
        async with aiohttp.ClientSession() as session, session.post(
            workspace.localnet.net.http_url, data=await request.read(),
            headers={"Content-Type": "application/json"},
        ) as upstream:  # fmt: skip
            return web.Response(body=await upstream.read(), content_type="application/json")

    runner = web.AppRunner(web.Application())
    runner.app.router.add_post("/", handle)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with Rpc(f"http://127.0.0.1:{port}", retries=3, backoff=0.01) as rpc:
            assert await rpc.balance(workspace.wallet.pubkey()) > 0
        assert failures == 0
    finally:
        await runner.cleanup()


async def test_nothing_answers(workspace):
    started = time.monotonic()
    async with Rpc([DEAD, "http://127.0.0.1:10"], retries=2, backoff=0.01) as rpc:
        try:
            await rpc.balance(Keypair().pubkey())
        except RpcUnavailable as e:
            assert f"cannot reach the RPC at {DEAD}, http://127.0.0.1:10" in str(e)
        else:
            raise AssertionError("expected RpcUnavailable")
    assert time.monotonic() - started < 5


async def test_program_errors_carry_the_idl_name_rule_and_logs(workspace, helpers, core, tmp_path):
    run_file = load_run_file(helpers.config_copy(tmp_path, "program-errors"), core)
    async with Rpc(workspace.localnet.net.http_url, idl=core.idl) as rpc:
        client = RunClient(rpc, workspace.program_id, idl=core.idl)
        await client.create_run(workspace.wallet, run_file, open_run=False)
        # the authority bypasses the SDK's validation: the program's own rule comes back
        try:
            await client._as_authority("update_config", workspace.wallet, "program-errors",
                                       {"config": {**_config(run_file), "witness_nodes": 0},
                                        "progress": {"epoch": 0, "step": 1, "epoch_start_data_index": 0}})  # fmt: skip
        except ProgramError as e:
            assert (e.name, e.code) == ("ConfigInvalid", 6015)
            assert (
                e.rule
                == "witness_nodes must be > 0, <= 32 and <= init_min_clients (every seat filled at the start)"
            )
            assert any("failed: custom program error" in line for line in e.logs)
        else:
            raise AssertionError("expected ProgramError")
        stranger = Keypair()
        await rpc.airdrop(stranger.pubkey(), 10**9)
        try:
            await client.set_paused(stranger, "program-errors", False)
        except ProgramError as e:
            assert e.name == "Unauthorized" and e.msg == "Signer is not the run's authority"
        else:
            raise AssertionError("expected ProgramError")
        await asyncio.sleep(0)


def _config(run_file) -> dict:
    from cohort.sdk.models import to_idl

    return to_idl(run_file.config)
