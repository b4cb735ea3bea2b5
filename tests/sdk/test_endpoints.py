"""RunClient.join_run over real RPC (the node key's Ed25519 proof built by the SDK, the address kept in the
wallet's Endpoint account) and RunClient.endpoints reading every member's address with one
getMultipleAccounts."""

from __future__ import annotations

import pytest
from solders.keypair import Keypair

from cohort.sdk.client import RunClient
from cohort.sdk.models import RunState
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file


async def test_members_read_each_others_endpoints_from_their_accounts(
    workspace, helpers, core, tmp_path
):
    run_file = load_run_file(helpers.config_copy(tmp_path, "endpoints"), core)
    net = workspace.localnet.net
    async with Rpc(net.http_url, idl=core.idl) as rpc:
        client = RunClient(rpc, workspace.program_id, ws_url=net.ws_url, idl=core.idl)
        await client.create_run(workspace.wallet, run_file)
        wallets = [Keypair() for _ in range(3)]
        nodes = [Keypair.from_seed(bytes([i + 1]) * 32) for i in range(3)]
        for i, (wallet, node) in enumerate(zip(wallets, nodes, strict=True)):
            await rpc.airdrop(wallet.pubkey(), 10**9)
            await client.join_run(wallet, "endpoints", node, f"127.0.0.1:{4000 + i}")
        with pytest.raises(ValueError, match="at most 160"):
            await client.join_run(wallets[0], "endpoints", nodes[0], "x" * 161)
        await rpc.raw_request("localnet_warpTime", [run_file.config.waiting_for_members_extra_time])
        await client.tick(wallets[0], "endpoints")
        run = await client.fetch_run("endpoints")
        assert run.state == RunState.Warmup and len(run.clients) == 3
        expected = {node.pubkey(): f"127.0.0.1:{4000 + i}" for i, node in enumerate(nodes)}
        assert await client.endpoints(run) == expected

        # a member that left has no Endpoint account any more
        await client.exit_run(wallets[2], "endpoints")
        assert (
            await rpc.account_data(client.endpoint_address(run.address, wallets[2].pubkey()))
            is None
        )
        run = await client.fetch_run("endpoints")
        assert await client.endpoints(run) == {
            nodes[0].pubkey(): "127.0.0.1:4000",
            nodes[1].pubkey(): "127.0.0.1:4001",
        }
