"""`cohort run points RUN [WALLET]`: what wallets earned, claimed (Points accounts) and not yet claimed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.scripted_run import play_epoch

from cohort.sdk.client import RunClient
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file


def test_points_after_an_epoch_and_an_exit(workspace, helpers, core, tmp_path: Path):
    ws = workspace
    run_file = load_run_file(helpers.config_copy(tmp_path, "points-run"), core)
    members = [Keypair() for _ in range(run_file.config.init_min_clients)]

    async def create() -> None:
        async with Rpc(ws.localnet.net.http_url, idl=core.idl) as rpc:
            await RunClient(rpc, ws.program_id, idl=core.idl).create_run(ws.wallet, run_file)

    async def play_and_leave() -> None:
        async with Rpc(ws.localnet.net.http_url, idl=core.idl) as rpc:
            client = RunClient(rpc, ws.program_id, idl=core.idl)
            for m in members:
                await rpc.airdrop(m.pubkey(), 10**9)
            await play_epoch(client, "points-run", members)
            await client.exit_run(members[0], "points-run")

    asyncio.run(create())
    empty = ws.cli("run", "points", "points-run")
    assert empty.output.strip() == "no points in run points-run yet", empty.output
    asyncio.run(play_and_leave())

    rows = json.loads(ws.cli("run", "points", "points-run", "--json").output)
    by_wallet = {r["wallet"]: r for r in rows}
    assert set(by_wallet) == {str(m.pubkey()) for m in members}
    leaver = by_wallet[str(members[0].pubkey())]
    assert leaver["claimed"] == leaver["total"] > 0 and leaver["unclaimed"] == 0
    stayer = by_wallet[str(members[1].pubkey())]
    assert stayer["unclaimed"] == stayer["total"] == leaver["total"] and stayer["claimed"] == 0
    one = json.loads(
        ws.cli("run", "points", "points-run", str(members[0].pubkey()), "--json").output
    )
    assert one == [leaver]
    table = ws.cli("run", "points", "points-run")
    assert table.exit_code == 0 and "unclaimed" in table.output
    assert "not a base58 address" in helpers.one_error_line(
        ws.cli("run", "points", "points-run", "nope")
    )

    # closing the run settles what nobody claimed into the wallets' Points accounts first: nobody loses any
    async def points_accounts(address: Pubkey | None) -> tuple[Pubkey, dict[str, int]]:
        async with Rpc(ws.localnet.net.http_url, idl=core.idl) as rpc:
            client = RunClient(rpc, ws.program_id, idl=core.idl)
            address = address or await client.resolve("points-run")
            out = {}
            for m in members:
                data = await rpc.account_data(client.points_address(address, m.pubkey()))
                out[str(m.pubkey())] = (
                    core.idl.decode_account("Points", data)["points"] if data else 0
                )
            return address, out

    address, before = asyncio.run(points_accounts(None))
    assert before[str(members[1].pubkey())] == 0
    assert ws.cli("run", "pause", "points-run").exit_code == 0
    result = ws.cli("run", "close", "points-run")
    assert result.exit_code == 0, result.output
    assert asyncio.run(points_accounts(address))[1] == {w: r["total"] for w, r in by_wallet.items()}
