"""The treasurer through the SDK on the localnet (JSON-RPC): `cohort deploy --program treasurer`, a run's
members earn points in a scripted epoch, a Token-2022 vault is funded, and each member's claim key claims
what TreasurerClient computes — exactly its settled points times the rate — and nothing more."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from support.scripted_run import funded_run, play_epoch

from cohort.sdk.errors import ProgramError
from cohort.sdk.rpc import Rpc
from cohort.sdk.run_config import load_run_file
from cohort.sdk.treasurer import TOKEN_2022_PROGRAM_ID, Treasurer, TreasurerClient

RATE = 7


async def token_account(rpc: Rpc, payer: Keypair, mint: Pubkey, owner: Pubkey) -> Pubkey:
    account = Keypair()
    lamports = await rpc.rent_exempt(165)
    create = create_account(CreateAccountParams(from_pubkey=payer.pubkey(), to_pubkey=account.pubkey(),
                                                lamports=lamports, space=165, owner=TOKEN_2022_PROGRAM_ID))  # fmt: skip
    init = Instruction(TOKEN_2022_PROGRAM_ID, bytes([18]) + bytes(owner),
                       [AccountMeta(account.pubkey(), False, True), AccountMeta(mint, False, False)])  # fmt: skip
    await rpc.send([create, init], payer, [account])
    return account.pubkey()


async def balance(rpc: Rpc, account: Pubkey) -> int:
    return int.from_bytes((await rpc.account_data(account))[64:72], "little")


def test_a_member_claims_its_settled_points_over_rpc(workspace, helpers, core, tmp_path: Path):
    ws = workspace
    keypair = tmp_path / "treasurer-keypair.json"
    deployed = ws.cli("deploy", "--program", "treasurer", "--program-keypair", str(keypair))
    assert deployed.exit_code == 0, deployed.output
    ws.restore_default_program()
    program_id = Pubkey.from_string(deployed.output.split("program id ")[1].split()[0])
    run_file = load_run_file(helpers.config_copy(tmp_path, "treasurer-run"), core)

    async def scenario() -> None:
        async with funded_run(ws, core, run_file) as (rpc, client, members):
            await play_epoch(client, "treasurer-run", members)
            run = await client.resolve("treasurer-run")
            for member in members[:2]:
                await client.settle_points(ws.wallet, run, member.pubkey())
            treasurer = TreasurerClient(rpc, Treasurer(program_id, ws.program_id))
            t = treasurer.treasurer

            mint, mint_authority = Keypair(), Keypair()
            create = create_account(CreateAccountParams(
                from_pubkey=ws.wallet.pubkey(), to_pubkey=mint.pubkey(), lamports=await rpc.rent_exempt(82),
                space=82, owner=TOKEN_2022_PROGRAM_ID))  # fmt: skip
            init = Instruction(TOKEN_2022_PROGRAM_ID, bytes([20, 0]) + bytes(mint_authority.pubkey()) + bytes(33),
                               [AccountMeta(mint.pubkey(), False, True)])  # fmt: skip
            await rpc.send([create, init], ws.wallet, [mint])
            init_treasury = t.init_treasury(ws.wallet.pubkey(), ws.wallet.pubkey(), run, mint.pubkey(),
                                            TOKEN_2022_PROGRAM_ID, RATE, 86_400)  # fmt: skip
            await treasurer.send([init_treasury], ws.wallet)
            source = await token_account(rpc, ws.wallet, mint.pubkey(), ws.wallet.pubkey())
            mint_to = Instruction(TOKEN_2022_PROGRAM_ID, bytes([7]) + (10**6).to_bytes(8, "little"),
                                  [AccountMeta(mint.pubkey(), False, True), AccountMeta(source, False, True),
                                   AccountMeta(mint_authority.pubkey(), True, False)])  # fmt: skip
            await rpc.send([mint_to], ws.wallet, [mint_authority])
            treasury = await treasurer.treasury(run)
            await treasurer.send(
                [t.fund(run, treasury, ws.wallet.pubkey(), source, 10**6)], ws.wallet
            )

            member = members[0]
            claim_key = Keypair()
            await rpc.airdrop(claim_key.pubkey(), 10**8)
            await treasurer.register_claim_key(run, member, claim_key.pubkey())
            owed = await treasurer.entitlement(run, member.pubkey())
            points = client.idl.decode_account(
                "Points", await rpc.account_data(t.points_address(run, member.pubkey()))
            )
            assert owed.points == points["points"] > 0 and owed.claimable == points["points"] * RATE
            destination = await token_account(rpc, ws.wallet, mint.pubkey(), Keypair().pubkey())
            await treasurer.claim(run, member.pubkey(), claim_key, destination)
            assert await balance(rpc, destination) == owed.claimable
            assert (await treasurer.entitlement(run, member.pubkey())).claimable == 0
            with pytest.raises(ProgramError) as refused:
                await treasurer.claim(run, member.pubkey(), claim_key, destination, 1)
            assert refused.value.name == "NothingToClaim"
            # another member's claim key cannot take this member's (or its own unregistered) points
            with pytest.raises(ProgramError) as refused:
                await treasurer.claim(run, members[1].pubkey(), claim_key, destination, 1)
            assert refused.value.name == "WrongAccountOwner"  # members[1] registered no claim key
            assert (
                await balance(rpc, treasury["vault"]) == 10**6 - owed.claimable
            )  # tokens conserved

    asyncio.run(scenario())
