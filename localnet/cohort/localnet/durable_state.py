"""What the ledger stores for the bank, and how a bank is rebuilt from it.

Record kinds (compact JSON, see ledger.py for the framing):
  tx       a landed transaction, its block's header, and the post-state of the accounts it wrote
  set      accounts set directly (localnet_setAccount)
  clock    the slot and the warp offset (localnet_warpTime, clean shutdown)
  snapshot the header of a snapshot, followed by `set`, `blocks` and `txs` records with the full state
Every record carries `slot` and `wall` (unix seconds): after a restart the slot continues from the newest
one, advanced by the wall time that passed, so it never goes backwards.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from solders.account import Account
from solders.pubkey import Pubkey

from .bank import Bank, Commit
from .blocks import Block
from .codec import b64decode, b64encode
from .history import TxRecord
from .ledger import iter_chunks

_ACCOUNT = struct.Struct("<QBQ32s")  # lamports, executable, rent epoch, owner; then the data


def pack_account(account: Account | None) -> str | None:
    if account is None:
        return None
    head = _ACCOUNT.pack(
        account.lamports, account.executable, account.rent_epoch, bytes(account.owner)
    )
    return b64encode(head + bytes(account.data))


def unpack_account(text: str | None) -> Account | None:
    if text is None:
        return None
    raw = b64decode(text)
    lamports, executable, rent_epoch, owner = _ACCOUNT.unpack_from(raw)
    return Account(
        lamports, raw[_ACCOUNT.size :], Pubkey.from_bytes(owner), bool(executable), rent_epoch
    )


def tx_record(commit: Commit, wall: float) -> dict[str, Any]:
    return {
        "k": "tx",
        "slot": commit.block.slot,
        "wall": wall,
        "tx": commit.record.to_wire(),
        "block": commit.block.header(),
        "accounts": [[str(key), pack_account(account)] for key, account in commit.accounts],
    }


def set_record(bank: Bank, accounts: list[tuple[Pubkey, Account]], wall: float) -> dict[str, Any]:
    return {
        "k": "set",
        "slot": bank.slot,
        "wall": wall,
        "accounts": [[str(key), pack_account(account)] for key, account in accounts],
    }


def clock_record(bank: Bank, wall: float) -> dict[str, Any]:
    return {
        "k": "clock",
        "slot": bank.slot,
        "wall": wall,
        "offset": bank.clock.time_offset,
        "unix": bank.blocks.latest.block_time,
    }


def snapshot_records(bank: Bank, wall: float) -> Iterator[dict[str, Any]]:
    """The full state, captured now; account states are read eagerly, the rest is encoded lazily."""
    header = clock_record(bank, wall)
    header["k"] = "snapshot"
    header["transactionCount"] = bank.transaction_count
    accounts = [[str(key), pack_account(bank.get_account(key))] for key in bank.written]
    records = list(bank.history.by_signature.values())
    blocks = [b.header() for b in bank.blocks.all_blocks() if b.signatures]

    def generate() -> Iterator[dict[str, Any]]:
        yield header
        for chunk in iter_chunks(accounts, 1000):
            yield {"k": "set", "slot": header["slot"], "wall": wall, "accounts": chunk}
        for chunk in iter_chunks(blocks, 5000):
            yield {"k": "blocks", "slot": header["slot"], "wall": wall, "blocks": chunk}
        for chunk in iter_chunks(records, 1000):
            yield {
                "k": "txs",
                "slot": header["slot"],
                "wall": wall,
                "txs": [r.to_wire() for r in chunk],
            }

    return generate()


def restore_bank(bank: Bank, records: list[dict[str, Any]]) -> None:
    """Load the state in `records` (a snapshot's and the logs' after it) into a freshly created bank."""
    accounts: dict[str, str | None] = {}
    txs: dict[str, TxRecord] = {}
    blocks: dict[int, Block] = {}
    last_slot, last_wall, offset, min_unix = 0, 0.0, 0.0, 0
    for record in records:
        kind = record["k"]
        if kind in ("set", "tx"):
            accounts.update((key, value) for key, value in record["accounts"])
        if kind == "tx":
            tx = TxRecord.from_wire(record["tx"])
            txs.setdefault(tx.signature, tx)
            block = Block.from_header(record["block"])
            blocks.setdefault(block.slot, block)
            min_unix = max(min_unix, block.block_time)
        elif kind == "txs":
            for wire in record["txs"]:
                tx = TxRecord.from_wire(wire)
                txs.setdefault(tx.signature, tx)
        elif kind == "blocks":
            for header in record["blocks"]:
                block = Block.from_header(header)
                blocks.setdefault(block.slot, block)
                min_unix = max(min_unix, block.block_time)
        elif kind in ("clock", "snapshot"):
            offset = record["offset"]
            min_unix = max(min_unix, record["unix"])
        last_slot = max(last_slot, record["slot"])
        last_wall = max(last_wall, record["wall"])
    bank.load(
        {Pubkey.from_string(k): unpack_account(v) for k, v in accounts.items()},
        sorted(txs.values(), key=lambda r: r.slot),
        list(blocks.values()),
        last_slot=last_slot,
        last_wall=last_wall,
        time_offset=offset,
        min_unix=min_unix,
    )
