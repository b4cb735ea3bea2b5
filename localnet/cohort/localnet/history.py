"""Transaction history: landed transactions by signature, and the signatures touching each address.

At most `max_records` are kept: beyond that the oldest are forgotten, but only once their blockhash
has expired (`trim`), so the signature check that stops replays never loses a transaction that could
still land.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from solders.transaction import VersionedTransaction

from .codec import b64decode, b64encode


@dataclass
class TxRecord:
    """A landed transaction: its wire bytes and its status meta in the RPC's `json` form."""

    signature: str
    slot: int
    block_time: int
    raw: bytes
    meta: dict[str, Any]  # err, status, fee, pre/postBalances, innerInstructions, logMessages, ...
    account_keys: list[str]  # static keys, then loaded writable, then loaded readonly
    _tx: VersionedTransaction | None = field(default=None, repr=False)

    @property
    def tx(self) -> VersionedTransaction:
        if self._tx is None:
            self._tx = VersionedTransaction.from_bytes(self.raw)
        return self._tx

    @property
    def err(self) -> Any:
        return self.meta["err"]

    @property
    def is_legacy(self) -> bool:
        return not isinstance(self.tx.version(), int)

    def to_wire(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "slot": self.slot,
            "blockTime": self.block_time,
            "raw": b64encode(self.raw),
            "meta": self.meta,
        }

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> TxRecord:
        raw = b64decode(wire["raw"])
        tx = VersionedTransaction.from_bytes(raw)
        loaded = wire["meta"].get("loadedAddresses") or {"writable": [], "readonly": []}
        keys = [str(k) for k in tx.message.account_keys] + loaded["writable"] + loaded["readonly"]
        return cls(wire["signature"], wire["slot"], wire["blockTime"], raw, wire["meta"], keys, tx)


class TxHistory:
    def __init__(self, max_records: int) -> None:
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        self.max_records = max_records
        self.by_signature: dict[str, TxRecord] = {}
        self._by_address: dict[str, deque[TxRecord]] = {}
        self._order: deque[TxRecord] = deque()  # as added: oldest first

    def __len__(self) -> int:
        return len(self.by_signature)

    def __contains__(self, signature: str) -> bool:
        return signature in self.by_signature

    def get(self, signature: str) -> TxRecord | None:
        return self.by_signature.get(signature)

    def add(self, record: TxRecord) -> None:
        self.by_signature[record.signature] = record
        self._order.append(record)
        for key in set(record.account_keys):
            self._by_address.setdefault(key, deque()).append(record)

    def trim(self, keep_from_slot: int) -> list[TxRecord]:
        """Forget the oldest records beyond `max_records` that landed before `keep_from_slot`."""
        gone: list[TxRecord] = []
        order = self._order
        while len(order) > self.max_records and order[0].slot < keep_from_slot:
            record = order.popleft()
            if self.by_signature.get(record.signature) is record:
                del self.by_signature[record.signature]
            for key in set(record.account_keys):
                records = self._by_address[key]
                if records[0] is record:
                    records.popleft()
                else:
                    records.remove(record)
                if not records:
                    del self._by_address[key]
            gone.append(record)
        return gone

    def for_address(
        self, address: str, limit: int, before: str | None = None, until: str | None = None
    ) -> list[TxRecord]:
        """Newest first; `before` starts after that signature, `until` stops before it (both exclusive)."""
        records = self._by_address.get(address, ())
        out: list[TxRecord] = []
        started = before is None
        for record in reversed(records):
            if not started:
                started = record.signature == before
                continue
            if record.signature == until or len(out) >= limit:
                break
            out.append(record)
        return out
