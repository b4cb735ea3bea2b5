"""The SDK's side of the new instructions over real RPC: RunClient.vote_weights (finishers set the
checkpoint's weights), report_equivocation (two signed results of one step; refused once their epoch ended,
whose points are then vested), settle_points (close_run settles what nobody claimed), close_points and close_endpoint once the run is
closed."""

from __future__ import annotations

import hashlib

import pytest
from solders.keypair import Keypair
from support.scripted_run import funded_run, play_epoch

from cohort.sdk.client import RunClient, SignedResult
from cohort.sdk.errors import ProgramError
from cohort.sdk.run_config import load_run_file
from cohort.sdk.statements import result_statement


def signed(
    client: RunClient, node: Keypair, run, epoch: int, step: int, payload: bytes
) -> SignedResult:
    commitment = hashlib.sha256(payload).digest()
    message = result_statement(client.idl, run, epoch, step, (0, 8), commitment)
    return SignedResult(epoch, step, (0, 8), commitment, bytes(node.sign_message(message)))


async def test_votes_equivocation_and_points_through_the_sdk(workspace, helpers, core, tmp_path):
    run_file = load_run_file(helpers.config_copy(tmp_path, "votes"), core)
    async with funded_run(workspace, core, run_file) as (rpc, client, members):
        nodes = [Keypair() for _ in members]
        await play_epoch(client, "votes", members, node_keys=nodes)

        # the epoch's finishers vote until the next epoch starts: a strict majority sets the weights
        run = await client.fetch_run("votes")
        manifest = hashlib.sha256(b"epoch-0 manifest").digest()
        for c in run.clients[:2]:
            await client.vote_weights(next(m for m in members if m.pubkey() == c.signer), "votes", c.index,
                                      run.progress.step, manifest)  # fmt: skip
        checkpoint = (await client.fetch_run("votes")).model.checkpoint
        assert checkpoint.weights_sha256 == manifest and checkpoint.step == run.progress.step

        # a trainer had signed two different results for the epoch's first step: anyone reports them
        accused = run.clients[1]
        node = next(n for n in nodes if n.pubkey() == accused.p2p_identity)
        step = run.progress.step - 2
        epoch = run.epoch_number  # the ended epoch's: the chain keeps it until the next Warmup
        first = signed(client, node, run.address, epoch, step, b"one")
        second = signed(client, node, run.address, epoch, step, b"two")
        with pytest.raises(ValueError, match="different commitments"):
            await client.report_equivocation(
                members[0], run.address, accused.index, accused.p2p_identity, first, first
            )
        reporter = Keypair()
        await rpc.airdrop(reporter.pubkey(), 10**9)
        # a conviction comes only while its epoch runs: the ended epoch's points are vested (credited), so the
        # report is refused now and nobody forfeits anything (tests/coordinator convict within an epoch)
        with pytest.raises(ProgramError, match="InvalidRunState"):
            await client.report_equivocation(
                reporter, run.address, accused.index, accused.p2p_identity, first, second
            )
        run = await client.fetch_run("votes")
        assert run.clients[1].state != "Convicted"

        # closing settles the members' points into their Points accounts; they close them afterwards
        owed = {e.signer: e.earned for e in run.registry if e.earned}
        assert len(owed) == len(members)
        await client.set_paused(workspace.wallet, "votes", True)
        await client.close_run(workspace.wallet, "votes")
        assert await rpc.account_data(run.address) is None
        for wallet in members:  # the Endpoints exit_run never closed: each wallet closes its own
            endpoint = client.endpoint_address(run.address, wallet.pubkey())
            assert await rpc.account_data(endpoint) is not None
            await client.close_endpoint(wallet, run.address)
            assert await rpc.account_data(endpoint) is None
        for wallet in members:
            points = await rpc.account_data(client.points_address(run.address, wallet.pubkey()))
            if wallet.pubkey() not in owed:
                assert points is None
                continue
            assert core.idl.decode_account("Points", points)["points"] == owed[wallet.pubkey()]
            await client.close_points(wallet, run.address)
            assert (
                await rpc.account_data(client.points_address(run.address, wallet.pubkey())) is None
            )
