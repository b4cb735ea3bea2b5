"""The ledger on its own: framing, torn tails, and snapshots taken while transactions keep arriving."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction

from cohort.localnet.clock import SlotClock
from cohort.localnet.ledger import frame, read_frames
from cohort.localnet.node import Node


def test_frames_stop_at_the_first_torn_or_corrupt_record() -> None:
    records = [{"k": "clock", "n": i} for i in range(3)]
    data = b"".join(frame(r) for r in records)
    assert read_frames(data) == (records, len(data))
    assert read_frames(data[:-1])[0] == records[:2]
    corrupt = bytearray(data)
    corrupt[-2] ^= 0xFF
    assert read_frames(bytes(corrupt))[0] == records[:2]


def test_clock_never_goes_backwards() -> None:
    clock = SlotClock(400, 10, base_mono=100.0, min_unix=5_000)
    assert clock.slot(100.0) == 10 and clock.slot(100.85) == 12
    assert clock.unix_timestamp(1_000.0) == 5_000  # a wall clock behind the ledger's last time
    assert clock.warp(4.0) == 10 and clock.slot(100.0) == 20
    resumed = SlotClock.resume(400, last_slot=20, time_offset=4.0, last_unix=6_000, mono=0.0)
    assert resumed.slot(0.0) == 21 and resumed.unix_timestamp(5_000.0) == 6_000


async def test_snapshots_during_traffic_then_crash_recovery(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    node = Node.open(400, ledger)
    node.ledger.compact_bytes = 4_000  # a snapshot every few transactions
    faucet_airdrops = []
    for _ in range(3):
        to = Keypair()
        raw, tx = node.bank.airdrop_transaction(to.pubkey(), 10**10)
        faucet_airdrops.append((to, await node.send(raw, tx, preflight=True, verify=False)))
    payer = faucet_airdrops[0][0]
    blockhash = Hash.from_string(node.bank.latest_blockhash()[0])
    recipients = [Keypair().pubkey() for _ in range(30)]
    txs = [
        VersionedTransaction(
            MessageV0.try_compile(
                payer.pubkey(),
                [
                    transfer(
                        TransferParams(from_pubkey=payer.pubkey(), to_pubkey=to, lamports=10**6 + i)
                    )
                ],
                [],
                blockhash,
            ),
            [payer],
        )
        for i, to in enumerate(recipients)
    ]
    await asyncio.gather(*(node.send(bytes(tx), tx, preflight=True) for tx in txs))
    await node.ledger.idle()
    assert len(list(ledger.glob("snapshot-*.bin"))) == 1  # older generations were cleaned up
    os.close(node.ledger._fd)  # a crash: no final snapshot

    again = Node.open(400, ledger)
    try:
        assert [again.bank.svm.get_balance(k) for k in recipients] == [10**6 + i for i in range(30)]
        assert len(again.bank.history) == 33
        assert again.bank.slot > node.bank.slot - 1
    finally:
        await again.close()
