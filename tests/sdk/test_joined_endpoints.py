"""RunClient.join_run over real RPC (the node key's Ed25519 proof built by the SDK) and
RunClient.joined_endpoints reading the peers' addresses back from the run's transaction logs."""

from __future__ import annotations

import pytest
from solders.keypair import Keypair

from cohort.sdk.client import RunClient
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file


async def test_peers_read_each_others_endpoints_from_the_logs(workspace, helpers, core, tmp_path):
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
        expected = {node.pubkey(): f"127.0.0.1:{4000 + i}" for i, node in enumerate(nodes)}
        assert await client.joined_endpoints("endpoints") == expected
        # a bound smaller than the run's history reads only the newest transactions
        assert await client.joined_endpoints("endpoints", max_transactions=1) == {
            nodes[2].pubkey(): "127.0.0.1:4002"
        }
