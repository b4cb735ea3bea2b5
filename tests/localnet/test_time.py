"""Validator time: slots follow the wall clock, blockhashes expire after 150 slots, warps move the Clock."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.core import RPCException
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer
from solders.sysvar import CLOCK, SLOT_HASHES

from cohort.localnet.config import LocalnetConfig
from cohort.localnet.server import Localnet


def pay(payer: Keypair, to, lamports: int):
    return transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=lamports))


def clock_of(data: bytes) -> tuple[int, int]:
    """(slot, unix_timestamp) from the Clock sysvar's bytes."""
    slot, _epoch_start, _epoch, _leader_epoch, unix = struct.unpack("<QqQQq", data)
    return slot, unix


async def test_slots_follow_the_wall_clock_and_sysvars_follow_slots(chain_type) -> None:
    async with (
        Localnet(LocalnetConfig(port=0, slot_ms=50, cheats=True)) as net,
        AsyncClient(net.http_url) as client,
    ):
        started = time.monotonic()
        first = (await client.get_slot()).value
        await asyncio.sleep(0.3)
        second = (await client.get_slot()).value
        elapsed = time.monotonic() - started
        # slots follow the wall clock: at least the sleep's worth, at most the whole elapsed time's worth
        assert 0.3 / 0.05 - 2 <= second - first <= elapsed / 0.05 + 2
        # Clock and SlotHashes read in one request, so both come from the same slot
        clock_account, hashes_account = (
            await client.get_multiple_accounts([CLOCK, SLOT_HASHES])
        ).value
        clock_slot, unix = clock_of(clock_account.data)
        assert clock_slot >= second
        block_time = (await client.get_block_time(clock_slot)).value
        assert abs(unix - block_time) <= 1
        (count,) = struct.unpack_from("<Q", hashes_account.data)
        newest_slot, newest_hash = struct.unpack_from("<Q32s", hashes_account.data, 8)
        assert count > 3 and newest_slot < clock_slot  # a slot's own hash is not in SlotHashes yet
        block = (await client.get_block(newest_slot)).value
        assert bytes(block.blockhash) == newest_hash


async def test_warp_moves_the_clock_and_expires_blockhashes(
    chain, client: AsyncClient, payer: Keypair
) -> None:
    before_slot, before_unix = clock_of((await client.get_account_info(CLOCK)).value.data)
    old = (await client.get_latest_blockhash()).value.blockhash
    warped = (await chain.call("localnet_warpTime", 3600))["result"]
    after_slot, after_unix = clock_of((await client.get_account_info(CLOCK)).value.data)
    assert after_unix - before_unix >= 3600
    assert after_slot - before_slot >= 9000 and warped["slot"] == after_slot
    assert (await chain.call("isBlockhashValid", str(old)))["result"]["value"] is False
    tx = chain.sign(
        payer,
        [
            transfer(
                TransferParams(
                    from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=10**9
                )
            )
        ],
        old,
    )
    with pytest.raises(RPCException, match="Blockhash not found"):
        await client.send_transaction(tx)
    assert (await chain.call("localnet_warpTime", -1))["error"]["code"] == -32602  # never backwards


async def test_duplicate_transaction_is_already_processed(
    chain, client: AsyncClient, payer: Keypair
) -> None:
    blockhash = (await client.get_latest_blockhash()).value.blockhash
    tx = chain.sign(
        payer,
        [
            transfer(
                TransferParams(
                    from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(), lamports=10**9
                )
            )
        ],
        blockhash,
    )
    await client.send_transaction(tx, opts=chain.CONFIRMED)
    with pytest.raises(RPCException) as failure:
        await client.send_transaction(tx)
    assert "already been processed" in failure.value.args[0].message
    assert str(failure.value.args[0].data.err) == "TransactionErrorFieldless.AlreadyProcessed"


async def test_blocks_and_history_pages(chain, client: AsyncClient, payer: Keypair) -> None:
    blockhash = (await client.get_latest_blockhash()).value.blockhash
    to = Keypair().pubkey()
    signatures = []
    for lamports in (10**9, 2 * 10**9, 3 * 10**9):
        ix = pay(payer, to, lamports)
        signatures.append((await client.send_transaction(chain.sign(payer, [ix], blockhash))).value)
    page = (await client.get_signatures_for_address(to, limit=2)).value
    assert [s.signature for s in page] == signatures[::-1][:2]
    rest = (await client.get_signatures_for_address(to, before=page[-1].signature)).value
    assert [s.signature for s in rest] == signatures[:1]
    slot = page[0].slot
    block = (await client.get_block(slot, max_supported_transaction_version=0)).value
    assert signatures[-1] in [t.transaction.signatures[0] for t in block.transactions]
    assert slot in (await client.get_blocks(max(0, slot - 5))).value
    epoch = (await client.get_epoch_info()).value
    assert epoch.absolute_slot >= slot and epoch.slots_in_epoch == 432_000
