"""The node: the bank, its ledger and its subscribers, and the order things happen in.

A landed transaction is appended to the ledger and, once on disk, announced to subscribers and answered.
Without a ledger the chain is in memory only and answers at once.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from solders.account import Account
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from .bank import Bank, Commit
from .config import DEFAULT_MAX_HISTORY, DEFAULT_MAX_SUBSCRIPTIONS
from .durable_state import clock_record, restore_bank, set_record, snapshot_records, tx_record
from .ledger import Ledger, recover, reset
from .performance import PerformanceSamples
from .pubsub import PubSub
from .traffic import Traffic

log = logging.getLogger("cohort.localnet")


class Node:
    def __init__(
        self,
        bank: Bank,
        ledger: Ledger | None = None,
        *,
        max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
    ) -> None:
        self.bank = bank
        self.ledger = ledger
        self.pubsub = PubSub(bank, max_subscriptions)
        self.performance = PerformanceSamples(time.monotonic(), bank.slot, bank.transaction_count)
        self.traffic = Traffic()
        self.rpc_address: str | None = None  # host:port once the server listens
        self.recovery_notes: list[str] = []
        if ledger is not None:
            ledger.on_compact(lambda: snapshot_records(self.bank, time.time()))

    @classmethod
    def open(
        cls,
        slot_ms: int,
        ledger_dir: Path | None = None,
        wipe: bool = False,
        *,
        max_history: int = DEFAULT_MAX_HISTORY,
        max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
    ) -> Node:
        """A node in memory, or on a ledger directory (rebuilt from it if it holds one)."""
        bank = Bank(slot_ms, max_history=max_history)
        if ledger_dir is None:
            return cls(bank, max_subscriptions=max_subscriptions)
        if wipe:
            reset(ledger_dir)
        recovered = recover(ledger_dir)
        for note in recovered.notes:
            log.warning("ledger recovery: %s", note)
        if recovered.records:
            restore_bank(bank, recovered.records)
            log.info(
                "ledger %s: restored %d accounts and %d transactions; resuming at slot %d",
                ledger_dir,
                len(bank.written),
                len(bank.history),
                bank.slot,
            )
        node = cls(
            bank, Ledger(ledger_dir, recovered.generation), max_subscriptions=max_subscriptions
        )
        node.recovery_notes = recovered.notes
        return node

    def sync(self) -> None:
        """Advance to the wall-clock slot (called before each request and by the slot ticker)."""
        block = self.bank.sync()
        if block is not None:
            self.pubsub.on_slot(block)
            self.performance.observe(time.monotonic(), block.slot, self.bank.transaction_count)

    async def _durable(self, payload: dict) -> None:
        if self.ledger is not None:
            await self.ledger.append(payload)

    async def commit(self, commit: Commit) -> None:
        if self.ledger is not None:
            await self.ledger.append(tx_record(commit, time.time()))
        self.pubsub.on_transaction(commit)

    async def send(
        self, raw: bytes, tx: VersionedTransaction, *, preflight: bool, verify: bool = True
    ) -> str:
        commit = self.bank.execute(raw, tx, preflight=preflight, verify=verify)
        if commit is not None:
            await self.commit(commit)
        return str(tx.signatures[0])

    async def set_accounts(self, accounts: list[tuple[Pubkey, Account]]) -> None:
        for key, account in accounts:
            self.bank.set_account(key, account)
        await self._durable(set_record(self.bank, accounts, time.time()))
        for key, account in accounts:
            self.pubsub.on_account(key, account)

    async def warp(self, seconds: float) -> None:
        block = self.bank.warp(seconds)
        if block is not None:
            self.pubsub.on_slot(block)
        await self._durable(clock_record(self.bank, time.time()))

    async def snapshot(self) -> bool:
        if self.ledger is None:
            return False
        await self.ledger.snapshot_now()
        return True

    async def close(self) -> None:
        if self.ledger is not None:
            await self.ledger.snapshot_now()  # a clean stop leaves nothing to replay
            await self.ledger.close()
