"""The bank: LiteSVM driven like a validator's bank (slots, clock, blockhashes, history, faucet).

LiteSVM executes transactions; everything a validator adds around execution lives here: the 150-slot
blockhash window, duplicate detection, preflight (a transaction failing simulation neither lands nor pays),
pre/post balances and the status meta of each landed transaction, the block it landed in, and the set of
accounts it wrote (what the ledger persists). LiteSVM's own blockhash check and history are off because
this class does both with validator semantics. It is synchronous and single-threaded by design: the event
loop calls it, which serialises access to LiteSVM without locks.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from solders.account import Account
from solders.clock import Clock
from solders.epoch_schedule import EpochSchedule
from solders.hash import Hash
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction
from solders.transaction_metadata import FailedTransactionMetadata, TransactionMetadata

from .blocks import MAX_BLOCKHASH_AGE, Block, BlockStore, next_blockhash
from .clock import SlotClock, epoch_of
from .codec import b58encode, b64encode
from .config import DEFAULT_MAX_HISTORY
from .errors import (
    SEND_TRANSACTION_PREFLIGHT_FAILURE,
    TRANSACTION_SIGNATURE_VERIFICATION_FAILURE,
    RpcError,
    describe_transaction_error,
)
from .history import TxHistory, TxRecord
from .wire import AddressLookupFailed, ResolvedKeys, resolve_keys

SYSTEM_PROGRAM = Pubkey.from_string("11111111111111111111111111111111")
SYSVAR_OWNER = Pubkey.from_string("Sysvar1111111111111111111111111111111111111")
NATIVE_LOADER = Pubkey.from_string("NativeLoader1111111111111111111111111111111")
NONCE_ACCOUNT_SIZE = 80
# The faucet behind requestAirdrop: a fixed key, so every localnet (and every restart) has the same one.
FAUCET = Keypair.from_seed(hashlib.sha256(b"cohort localnet faucet").digest())
FAUCET_LAMPORTS = 10**18  # a billion SOL
LAMPORTS_PER_SIGNATURE = 5000


@dataclass
class Commit:
    """A landed transaction and the post-state of the accounts it may have written (None = deleted)."""

    record: TxRecord
    block: Block
    accounts: list[tuple[Pubkey, Account | None]]


def new_svm() -> LiteSVM:
    svm = (
        LiteSVM()
        .with_sigverify(False)  # verified once, before preflight, by the bank
        .with_blockhash_check(False)  # the bank keeps the 150-slot window LiteSVM lacks
        .with_transaction_history(0)  # the bank keeps history with the transaction bytes
    )
    svm.set_epoch_schedule(EpochSchedule.without_warmup())
    return svm


def preflight_error(err: Any, logs: list[str] | None = None, units: int = 0) -> RpcError:
    """The -32002 error solana-py turns into SendTransactionPreflightFailureMessage."""
    return RpcError(
        SEND_TRANSACTION_PREFLIGHT_FAILURE,
        f"Transaction simulation failed: {describe_transaction_error(err)}",
        {
            "accounts": None,
            "err": err,
            "innerInstructions": None,
            "loadedAccountsDataSize": None,
            "logs": logs or [],
            "replacementBlockhash": None,
            "returnData": None,
            "unitsConsumed": units,
        },
    )


def signature_verification_error() -> RpcError:
    return RpcError(
        TRANSACTION_SIGNATURE_VERIFICATION_FAILURE, "Transaction signature verification failure"
    )


def failure_err(result: FailedTransactionMetadata) -> Any:
    return json.loads(result.to_json())["err"]


def return_data_json(meta: TransactionMetadata) -> dict[str, Any] | None:
    returned = meta.return_data()
    data = bytes(returned.data)
    if not data:
        return None
    return {"programId": str(returned.program_id), "data": [b64encode(data), "base64"]}


def inner_instructions_json(meta: TransactionMetadata) -> list[dict[str, Any]]:
    out = []
    for index, inner in enumerate(meta.inner_instructions()):
        if inner:
            out.append(
                {
                    "index": index,
                    "instructions": [
                        {
                            "programIdIndex": ix.program_id_index,
                            "accounts": list(bytes(ix.accounts)),
                            "data": b58encode(bytes(ix.data)),
                            "stackHeight": ii.stack_height(),
                        }
                        for ii in inner
                        for ix in (ii.instruction(),)
                    ],
                }
            )
    return out


class Bank:
    def __init__(
        self,
        slot_ms: int,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        max_history: int = DEFAULT_MAX_HISTORY,
    ) -> None:
        self.monotonic = monotonic
        self.wall = wall
        self.svm = new_svm()
        self.genesis_hash = str(self.svm.latest_blockhash())  # LiteSVM's genesis is deterministic
        self.identity = Keypair.from_seed(hashlib.sha256(b"cohort localnet identity").digest())
        self.clock = SlotClock(slot_ms, 0, monotonic())
        now = self.clock.unix_timestamp(wall())
        genesis = Block(0, 0, next_blockhash(self.genesis_hash, 0), self.genesis_hash, now)
        self.blocks = BlockStore(genesis)
        self.history = TxHistory(max_history)
        self.written: set[Pubkey] = (
            set()
        )  # every account whose state may differ from LiteSVM's genesis
        self.transaction_count = 0
        self.set_account(FAUCET.pubkey(), Account(FAUCET_LAMPORTS, b"", SYSTEM_PROGRAM, False))
        self._apply_clock(genesis)

    def load(
        self,
        accounts: dict[Pubkey, Account | None],
        records: list[TxRecord],
        blocks: list[Block],
        *,
        last_slot: int,
        last_wall: float,
        time_offset: float,
        min_unix: int,
    ) -> None:
        """Bring a fresh bank to a persisted state; the slot resumes after `last_slot` plus the time since."""
        svm = self.svm
        # programs last: a loader-v3 program account only loads if its programdata is already there
        for executable_pass in (False, True):
            for key, account in accounts.items():
                if account is None:
                    if svm.get_account(key) is not None:
                        svm.set_account(key, Account(0, b"", SYSTEM_PROGRAM, False))
                elif account.executable == executable_pass:
                    svm.set_account(key, account)
        self.written.update(accounts)
        for block in blocks:
            self.blocks.restore(block)
        for record in records:
            self.history.add(record)
            block = self.blocks.get(record.slot)
            if block is not None:
                block.signatures.append(record.signature)
        self.transaction_count = len(self.history)
        self._trim_history()
        elapsed_slots = int(max(0.0, self.wall() - last_wall) * 1000 // self.clock.slot_ms)
        resume = max(last_slot, self.blocks.latest.slot) + max(1, elapsed_slots)
        self.clock = SlotClock.resume(
            self.clock.slot_ms, resume - 1, time_offset, min_unix, self.monotonic()
        )
        fresh = str(
            Hash(hashlib.sha256(os.urandom(32)).digest())
        )  # never reuse a pre-restart blockhash
        block = self.blocks.produce(resume, self.clock.unix_timestamp(self.wall()), blockhash=fresh)
        self._apply_clock(block)

    # --- time ---------------------------------------------------------------------------------------------
    @property
    def slot(self) -> int:
        return self.blocks.latest.slot

    def sync(self) -> Block | None:
        """Produce the block of the current wall-clock slot if it is new; returns it (None if unchanged)."""
        slot = self.clock.slot(self.monotonic())
        if slot <= self.blocks.latest.slot:
            return None
        block = self.blocks.produce(slot, self.clock.unix_timestamp(self.wall()))
        self._apply_clock(block)
        return block

    def warp(self, seconds: float) -> Block | None:
        self.clock.warp(seconds)
        return self.sync()

    def _apply_clock(self, block: Block) -> None:
        svm = self.svm
        epoch, index = epoch_of(block.slot)
        epoch_start = max(0, block.block_time - index * self.clock.slot_ms // 1000)
        svm.warp_to_slot(block.slot)
        svm.set_clock(Clock(block.slot, epoch_start, epoch, epoch + 1, block.block_time))
        svm.expire_blockhash()  # LiteSVM's own blockhash seeds durable nonces: keep it moving too
        svm.set_slot_hashes(self.blocks.slot_hashes())

    def latest_blockhash(self) -> tuple[str, int]:
        latest = self.blocks.latest
        return latest.blockhash, latest.block_height + MAX_BLOCKHASH_AGE

    # --- accounts -------------------------------------------------------------------------------------------
    def get_account(self, pubkey: Pubkey) -> Account | None:
        return self.svm.get_account(pubkey)

    def set_account(self, pubkey: Pubkey, account: Account) -> None:
        self.svm.set_account(pubkey, account)
        self.written.add(pubkey)

    # --- transactions -----------------------------------------------------------------------------------------
    def resolve(self, tx: VersionedTransaction) -> ResolvedKeys:
        return resolve_keys(tx, self.svm.get_account)

    def _blockhash_ok(self, tx: VersionedTransaction) -> bool:
        message = tx.message
        if self.blocks.blockhash_slot(str(message.recent_blockhash)) is not None:
            return True
        return tx.uses_durable_nonce() and self._nonce_matches(tx)

    def _nonce_matches(self, tx: VersionedTransaction) -> bool:
        """A durable-nonce transaction may use its nonce account's stored nonce instead of a recent hash."""
        message = tx.message
        first = message.instructions[0]
        nonce_key = message.account_keys[first.accounts[0]]
        account = self.svm.get_account(nonce_key)
        if account is None or len(account.data) != NONCE_ACCOUNT_SIZE:
            return False
        return bytes(account.data)[40:72] == bytes(message.recent_blockhash)

    def execute(
        self, raw: bytes, tx: VersionedTransaction, *, preflight: bool, verify: bool = True
    ) -> Commit | None:
        """Run a transaction like sendTransaction does.

        With preflight, any failure raises the RPC error and changes nothing. Without it, a transaction
        that would not land on a real cluster (bad signature, stale blockhash, duplicate, fee not payable)
        is dropped (returns None), and one that fails during execution lands, pays its fee, and is recorded.
        """
        signature = str(tx.signatures[0])
        if verify and not all(tx.verify_with_results()):
            if preflight:
                raise signature_verification_error()
            return None
        if signature in self.history:
            if preflight:
                raise preflight_error("AlreadyProcessed")
            return None
        if not self._blockhash_ok(tx):
            if preflight:
                raise preflight_error("BlockhashNotFound")
            return None
        try:
            resolved = self.resolve(tx)
        except AddressLookupFailed as exc:
            if preflight:
                raise preflight_error(exc.err) from None
            return None
        svm = self.svm
        keys = resolved.keys
        # Preflight is "execute, and undo it if it failed": cheaper than simulate-then-send and equivalent,
        # because a failed transaction only changes its fee payer (and, for durable nonces, the nonce).
        undo = (
            [(k, svm.get_account(k)) for k in self._failure_writes(tx, keys)] if preflight else []
        )
        pre_balances = [svm.get_balance(k) or 0 for k in keys]
        result = svm.send_transaction(tx)
        post_balances = [svm.get_balance(k) or 0 for k in keys]
        if isinstance(result, FailedTransactionMetadata):
            landed = (
                post_balances[0] != pre_balances[0]
            )  # no fee charged: it never loaded, never lands
            if preflight or not landed:
                for key, account in undo:
                    if account is not None:
                        svm.set_account(key, account)
                if preflight:
                    meta = result.meta()
                    raise preflight_error(
                        failure_err(result), meta.logs(), meta.compute_units_consumed()
                    )
                return None
            err = failure_err(result)
            meta = result.meta()
        else:
            err = None
            meta = result
        return self._land(raw, tx, signature, resolved, err, meta, pre_balances, post_balances)

    @staticmethod
    def _failure_writes(tx: VersionedTransaction, keys: list[Pubkey]) -> list[Pubkey]:
        """The accounts a failed transaction still changes: the fee payer, and a durable nonce."""
        if tx.uses_durable_nonce():
            first = tx.message.instructions[0]
            return [keys[0], keys[first.accounts[0]]]
        return [keys[0]]

    def _land(
        self,
        raw: bytes,
        tx: VersionedTransaction,
        signature: str,
        resolved: ResolvedKeys,
        err: Any,
        meta: TransactionMetadata,
        pre_balances: list[int],
        post_balances: list[int],
    ) -> Commit:
        block = self.blocks.latest
        status_meta: dict[str, Any] = {
            "err": err,
            "status": {"Ok": None} if err is None else {"Err": err},
            "fee": meta.fee(),
            "preBalances": pre_balances,
            "postBalances": post_balances,
            "innerInstructions": inner_instructions_json(meta),
            "logMessages": meta.logs(),
            "preTokenBalances": [],
            "postTokenBalances": [],
            "rewards": [],
            "loadedAddresses": {
                "writable": resolved.loaded_writable,
                "readonly": resolved.loaded_readonly,
            },
            "computeUnitsConsumed": meta.compute_units_consumed(),
        }
        returned = return_data_json(meta)
        if returned is not None:
            status_meta["returnData"] = returned
        record = TxRecord(
            signature,
            block.slot,
            block.block_time,
            raw,
            status_meta,
            [str(k) for k in resolved.keys],
            tx,
        )
        self._record(record, block)
        accounts = []
        get_account = self.svm.get_account
        for key, is_writable in zip(resolved.keys, resolved.writable, strict=True):
            if is_writable:
                account = get_account(key)
                if account is not None and account.owner in (SYSVAR_OWNER, NATIVE_LOADER):
                    continue  # a demoted sysvar/builtin: the runtime never writes it
                self.written.add(key)
                accounts.append((key, account))
        return Commit(record, block, accounts)

    def _record(self, record: TxRecord, block: Block) -> None:
        self.history.add(record)
        self.blocks.add_signature(block.slot, record.signature)
        self.transaction_count += 1
        self._trim_history()

    def _trim_history(self) -> None:
        """Keep the history bounded, but every transaction whose blockhash is still valid."""
        for gone in self.history.trim(self.blocks.latest.slot - MAX_BLOCKHASH_AGE):
            self.blocks.drop_signature(gone.slot, gone.signature)

    def simulate(self, tx: VersionedTransaction, *, check_blockhash: bool):
        """LiteSVM's simulation, or the TransactionError (RPC JSON) that stops it before execution."""
        if check_blockhash and not self._blockhash_ok(tx):
            return "BlockhashNotFound"
        try:
            self.resolve(tx)
        except AddressLookupFailed as exc:
            return exc.err
        return self.svm.simulate_transaction(tx)

    # --- faucet -----------------------------------------------------------------------------------------------
    def airdrop_transaction(self, to: Pubkey, lamports: int) -> tuple[bytes, VersionedTransaction]:
        """A faucet transfer signed with the current blockhash, unique among landed transactions."""
        for _ in range(3):
            blockhash = Hash.from_string(self.blocks.latest.blockhash)
            ix = transfer(
                TransferParams(from_pubkey=FAUCET.pubkey(), to_pubkey=to, lamports=lamports)
            )
            tx = VersionedTransaction(
                MessageV0.try_compile(FAUCET.pubkey(), [ix], [], blockhash), [FAUCET]
            )
            if str(tx.signatures[0]) not in self.history:
                return bytes(tx), tx
            # the same airdrop within one slot: start the next slot early for a fresh blockhash
            self.clock.bump()
            self.sync()
        raise RuntimeError("could not build a unique airdrop transaction")

    def fee_for_message(self, num_signatures: int) -> int:
        return LAMPORTS_PER_SIGNATURE * num_signatures
