"""Deploying a real program through loader-v3 transactions over RPC, invoking and upgrading it."""

from __future__ import annotations

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.core import RPCException
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair

from cohort.localnet.config import LocalnetConfig
from cohort.localnet.server import Localnet
from cohort.sdk import loader_v3


async def test_deploy_invoke_and_upgrade_a_program(chain_type) -> None:
    # one-minute slots: the deploy and the first upgrade attempt share a slot until we warp
    async with (
        Localnet(LocalnetConfig(port=0, slot_ms=60_000, cheats=True)) as net,
        AsyncClient(net.http_url) as client,
    ):
        await deploy_invoke_upgrade(chain_type(net.http_url, client), client)


async def deploy_invoke_upgrade(chain, client: AsyncClient) -> None:
    payer = await chain.funded(100)
    elf = chain.memo_elf()
    buffer = await chain.write_buffer(payer, elf)
    new_buffer = await chain.write_buffer(payer, elf)
    program = Keypair()
    program_rent = (
        await client.get_minimum_balance_for_rent_exemption(loader_v3.PROGRAM_SIZE)
    ).value
    deploy = loader_v3.deploy_with_max_data_len(
        payer.pubkey(),
        program.pubkey(),
        buffer.pubkey(),
        payer.pubkey(),
        program_rent,
        2 * len(elf),
    )
    blockhash = (await client.get_latest_blockhash()).value.blockhash
    await client.send_transaction(
        chain.sign(payer, deploy, blockhash, program), opts=chain.CONFIRMED
    )

    # the Explorer's view: jsonParsed program and programData accounts
    response = await chain.call("getAccountInfo", str(program.pubkey()), {"encoding": "jsonParsed"})
    parsed = response["result"]["value"]["data"]
    assert parsed["program"] == "bpf-upgradeable-loader" and parsed["parsed"]["type"] == "program"
    programdata = loader_v3.programdata_address(program.pubkey())
    assert parsed["parsed"]["info"]["programData"] == str(programdata)
    response = await chain.call("getAccountInfo", str(programdata), {"encoding": "jsonParsed"})
    info = response["result"]["value"]["data"]["parsed"]["info"]
    assert info["authority"] == str(payer.pubkey())
    deploy_slot = info["slot"]
    assert deploy_slot == (await client.get_slot()).value

    # invoke it: the memo program logs its input
    memo = Instruction(
        program.pubkey(), b"hello localnet", [AccountMeta(payer.pubkey(), True, False)]
    )
    signature = (
        await client.send_transaction(chain.sign(payer, [memo], blockhash), opts=chain.CONFIRMED)
    ).value
    tx = (await client.get_transaction(signature, max_supported_transaction_version=0)).value
    assert "Program log: hello localnet" in tx.transaction.meta.log_messages

    # upgrading in the deploy's slot fails like on a validator; in a later slot it succeeds
    upgrade = loader_v3.upgrade(
        program.pubkey(), new_buffer.pubkey(), payer.pubkey(), payer.pubkey()
    )
    with pytest.raises(RPCException) as failure:
        await client.send_transaction(chain.sign(payer, [upgrade], blockhash))
    assert any("deployed in this block already" in line for line in failure.value.args[0].data.logs)
    await chain.call("localnet_warpTime", 60)
    blockhash = (await client.get_latest_blockhash()).value.blockhash
    await client.send_transaction(chain.sign(payer, [upgrade], blockhash), opts=chain.CONFIRMED)
    response = await chain.call("getAccountInfo", str(programdata), {"encoding": "jsonParsed"})
    assert response["result"]["value"]["data"]["parsed"]["info"]["slot"] > deploy_slot
    again = await client.send_transaction(
        chain.sign(payer, [memo], blockhash), opts=chain.CONFIRMED
    )
    assert (await client.get_signature_statuses([again.value])).value[0].err is None
