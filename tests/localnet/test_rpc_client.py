"""The localnet through solana-py's AsyncClient: airdrops, transfers, history, accounts, filters."""

from __future__ import annotations

import base64

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.core import RPCException
from solana.rpc.models import DataSliceOpts, MemcmpOpts, TxOpts
from solders.keypair import Keypair
from solders.message import Message
from solders.rpc.errors import SendTransactionPreflightFailureMessage
from solders.system_program import TransferParams, transfer
from solders.transaction import Transaction
from solders.transaction_status import TransactionConfirmationStatus

from cohort.localnet.codec import b58encode

SOL = 1_000_000_000


def pay(payer: Keypair, to, lamports: int):
    return transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=lamports))


async def test_airdrop_then_confirmed_transfer(chain, client: AsyncClient, payer: Keypair) -> None:
    assert await client.is_connected()
    assert (await client.get_balance(payer.pubkey())).value == 10 * SOL
    to = Keypair().pubkey()
    blockhash = (await client.get_latest_blockhash()).value
    tx = chain.sign(payer, [pay(payer, to, SOL)], blockhash.blockhash)
    opts = TxOpts(
        skip_confirmation=False, last_valid_block_height=blockhash.last_valid_block_height
    )
    signature = (await client.send_transaction(tx, opts=opts)).value
    assert (await client.get_balance(to)).value == SOL
    assert (await client.get_balance(payer.pubkey())).value == 9 * SOL - 5000
    status = (await client.get_signature_statuses([signature])).value[0]
    assert (
        status.err is None and status.confirmation_status == TransactionConfirmationStatus.Finalized
    )
    history = (await client.get_signatures_for_address(to)).value
    assert [s.signature for s in history] == [signature]


async def test_get_transaction_in_every_encoding(
    chain, client: AsyncClient, payer: Keypair
) -> None:
    blockhash = (await client.get_latest_blockhash()).value.blockhash
    ix = pay(payer, Keypair().pubkey(), SOL)
    v0 = (
        await client.send_transaction(chain.sign(payer, [ix], blockhash), opts=chain.CONFIRMED)
    ).value
    legacy_tx = Transaction(
        [payer], Message.new_with_blockhash([ix], payer.pubkey(), blockhash), blockhash
    )
    legacy = (await client.send_transaction(legacy_tx, opts=chain.CONFIRMED)).value

    as_json = (await client.get_transaction(v0, max_supported_transaction_version=0)).value
    assert as_json.transaction.version == 0
    assert as_json.transaction.meta.post_balances[1] == SOL
    assert (
        as_json.transaction.meta.log_messages[-1]
        == "Program 11111111111111111111111111111111 success"
    )
    parsed = (
        await client.get_transaction(v0, "jsonParsed", max_supported_transaction_version=0)
    ).value
    instruction = parsed.transaction.transaction.message.instructions[0]
    assert instruction.program == "system" and instruction.parsed["type"] == "transfer"
    assert instruction.parsed["info"]["lamports"] == SOL
    raw = (await client.get_transaction(v0, "base64", max_supported_transaction_version=0)).value
    assert raw.transaction.transaction.signatures[0] == v0
    base58 = await chain.call(
        "getTransaction", str(v0), {"encoding": "base58", "maxSupportedTransactionVersion": 0}
    )
    assert base58["result"]["transaction"][1] == "base58"
    # version rules: a v0 transaction needs maxSupportedTransactionVersion; a legacy one reports none
    with pytest.raises(RPCException, match="Transaction version"):
        await client.get_transaction(v0)
    old = (await client.get_transaction(legacy)).value
    assert old.transaction.version is None and old.transaction.meta.err is None
    assert (await client.get_transaction(Keypair().sign_message(b"x"))).value is None


async def test_preflight_failure_neither_lands_nor_pays(
    chain, client: AsyncClient, payer: Keypair
) -> None:
    before = (await client.get_balance(payer.pubkey())).value
    blockhash = (await client.get_latest_blockhash()).value.blockhash
    tx = chain.sign(payer, [pay(payer, Keypair().pubkey(), before * 2)], blockhash)
    with pytest.raises(RPCException) as failure:
        await client.send_transaction(tx)
    message = failure.value.args[0]
    assert isinstance(message, SendTransactionPreflightFailureMessage)
    assert "custom program error: 0x1" in message.message
    assert any("insufficient lamports" in line for line in message.data.logs)
    assert message.data.units_consumed == 150
    assert (await client.get_balance(payer.pubkey())).value == before
    assert (await client.get_signature_statuses([tx.signatures[0]])).value == [None]
    # without preflight the same transaction lands, fails, and pays its fee
    await client.send_transaction(tx, opts=TxOpts(skip_preflight=True))
    status = (await client.get_signature_statuses([tx.signatures[0]])).value[0]
    assert status is not None and status.err is not None
    assert (await client.get_balance(payer.pubkey())).value == before - 5000


async def test_simulate_reports_logs_and_accounts(
    chain, client: AsyncClient, payer: Keypair
) -> None:
    to = Keypair().pubkey()
    blockhash = (await client.get_latest_blockhash()).value.blockhash
    tx = chain.sign(payer, [pay(payer, to, 12345678)], blockhash)
    sim = (await client.simulate_transaction(tx, sig_verify=True, accounts_addresses=[to])).value
    assert sim.err is None and sim.units_consumed == 150
    assert sim.accounts[0].lamports == 12345678
    assert (await client.get_balance(to)).value == 0  # simulation changes nothing


async def test_account_info_slices_and_multiple_accounts(
    chain, client: AsyncClient, payer: Keypair
) -> None:
    owner = Keypair().pubkey()
    key = Keypair().pubkey()
    data = bytes(range(64))
    await chain.set_account(key, owner, data)
    info = (await client.get_account_info(key)).value
    assert info.data == data and info.owner == owner and info.lamports == SOL
    sliced = (
        await client.get_account_info(key, data_slice=DataSliceOpts(offset=8, length=4))
    ).value
    assert sliced.data == bytes([8, 9, 10, 11])
    missing = Keypair().pubkey()
    many = (await client.get_multiple_accounts([key, missing, payer.pubkey()])).value
    assert many[0].data == data and many[1] is None and many[2].lamports == 10 * SOL


async def test_program_accounts_filters(chain, client: AsyncClient) -> None:
    program = Keypair().pubkey()
    tag_a, tag_b = b"\x01" * 8, b"\x02" * 8
    keys = [Keypair().pubkey() for _ in range(3)]
    await chain.set_account(keys[0], program, tag_a + b"\x00" * 24)
    await chain.set_account(keys[1], program, tag_a + b"\x00" * 8)
    await chain.set_account(keys[2], program, tag_b + b"\x00" * 24)
    everything = (await client.get_program_accounts(program)).value
    assert {a.pubkey for a in everything} == set(keys)
    memcmp = MemcmpOpts(offset=0, bytes=b58encode(tag_a))
    by_tag = (await client.get_program_accounts(program, filters=[memcmp])).value
    assert {a.pubkey for a in by_tag} == {keys[0], keys[1]}
    by_tag_and_size = (await client.get_program_accounts(program, filters=[32, memcmp])).value
    assert [a.pubkey for a in by_tag_and_size] == [keys[0]]
    # the other memcmp encodings web3.js and solders send
    await chain.set_account(keys[0], program, b"\xaa\xbb\xcc" + b"\x00" * 5)
    for filters in (
        [
            {
                "memcmp": {
                    "offset": 1,
                    "bytes": base64.b64encode(b"\xbb\xcc").decode(),
                    "encoding": "base64",
                }
            }
        ],
        [{"memcmp": {"offset": 0, "bytes": [0xAA, 0xBB], "encoding": "bytes"}}, {"dataSize": 8}],
    ):
        response = await chain.call(
            "getProgramAccounts", str(program), {"encoding": "base64", "filters": filters}
        )
        assert [a["pubkey"] for a in response["result"]] == [str(keys[0])]


async def test_repeated_airdrop_in_one_slot_lands_twice(chain, client: AsyncClient) -> None:
    keypair = await chain.funded(1)
    signature = (await client.request_airdrop(keypair.pubkey(), SOL)).value
    await client.confirm_transaction(signature)
    assert (await client.get_balance(keypair.pubkey())).value == 2 * SOL
