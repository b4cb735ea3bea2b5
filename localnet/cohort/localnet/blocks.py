"""Blocks: one per slot the localnet produced, and the window of blockhashes a transaction may use."""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

from solders.hash import Hash

MAX_BLOCKHASH_AGE = 150  # slots a blockhash stays valid, as on mainnet
SLOT_HASHES_MAX = 512  # entries of the SlotHashes sysvar
RECENT_EMPTY_BLOCKS = 10_000  # empty blocks kept for getBlock; older empty slots read as skipped


@dataclass
class Block:
    slot: int
    parent_slot: int
    blockhash: str
    previous_blockhash: str
    block_time: int
    signatures: list[str] = field(default_factory=list)

    @property
    def block_height(self) -> int:
        # every slot has a block here (skipped slots only exist when time jumps), so height == slot
        return self.slot

    def header(self) -> list:
        return [
            self.slot,
            self.parent_slot,
            self.blockhash,
            self.previous_blockhash,
            self.block_time,
        ]

    @classmethod
    def from_header(cls, header: list) -> Block:
        slot, parent, blockhash, previous, block_time = header
        return cls(int(slot), int(parent), str(blockhash), str(previous), int(block_time))


def next_blockhash(previous: str, slot: int) -> str:
    """Our own blockhash chain: unique per slot and never repeated across restarts (see BlockStore.resume)."""
    digest = hashlib.sha256(bytes(Hash.from_string(previous)) + slot.to_bytes(8, "little")).digest()
    return str(Hash(digest))


class BlockStore:
    """Produced blocks (all with transactions, the most recent empty ones) and the valid-blockhash window."""

    def __init__(self, genesis: Block) -> None:
        self._blocks: dict[int, Block] = {genesis.slot: genesis}
        self._slots: list[int] = [genesis.slot]  # ascending, for range queries
        self._empty: deque[int] = deque()
        self._recent: dict[str, int] = {genesis.blockhash: genesis.slot}  # blockhash -> slot
        self._recent_order: deque[tuple[int, str]] = deque([(genesis.slot, genesis.blockhash)])
        self.latest = genesis

    # --- production -------------------------------------------------------------------------------------
    def produce(self, slot: int, block_time: int, blockhash: str | None = None) -> Block:
        if slot <= self.latest.slot:
            raise ValueError(f"slot {slot} is not after the latest block {self.latest.slot}")
        previous = self.latest
        blockhash = blockhash or next_blockhash(previous.blockhash, slot)
        block = Block(slot, previous.slot, blockhash, previous.blockhash, block_time)
        self._insert(block)
        self._empty.append(slot)
        while len(self._empty) > RECENT_EMPTY_BLOCKS:
            old = self._blocks.get(self._empty.popleft())
            if old is not None and not old.signatures:
                self._remove(old.slot)
        self._remember_blockhash(slot, blockhash)
        self.latest = block
        return block

    def restore(self, block: Block) -> None:
        """Put back a block read from the ledger (out of order is fine; the newest becomes `latest`)."""
        if block.slot in self._blocks:
            return
        self._insert(block)
        if block.slot > self.latest.slot:
            self.latest = block

    def add_signature(self, slot: int, signature: str) -> None:
        self._blocks[slot].signatures.append(signature)

    def drop_signature(self, slot: int, signature: str) -> None:
        """The history forgot a transaction: so does its block, which goes once it is empty and
        older than the recent blocks kept anyway (it then reads as skipped)."""
        block = self._blocks.get(slot)
        if block is None or signature not in block.signatures:
            return
        block.signatures.remove(signature)
        if not block.signatures and (not self._empty or slot < self._empty[0]):
            self._remove(slot)

    def _insert(self, block: Block) -> None:
        self._blocks[block.slot] = block
        if not self._slots or block.slot > self._slots[-1]:
            self._slots.append(block.slot)
        else:
            self._slots.insert(bisect_left(self._slots, block.slot), block.slot)

    def _remove(self, slot: int) -> None:
        del self._blocks[slot]
        i = bisect_left(self._slots, slot)
        if i < len(self._slots) and self._slots[i] == slot:
            del self._slots[i]

    def _remember_blockhash(self, slot: int, blockhash: str) -> None:
        self._recent[blockhash] = slot
        self._recent_order.append((slot, blockhash))
        while len(self._recent_order) > SLOT_HASHES_MAX:
            _, old = self._recent_order.popleft()
            self._recent.pop(old, None)

    # --- queries ----------------------------------------------------------------------------------------
    def get(self, slot: int) -> Block | None:
        return self._blocks.get(slot)

    def slots_between(self, start: int, end: int, limit: int | None = None) -> list[int]:
        i = bisect_left(self._slots, start)
        out: list[int] = []
        while (
            i < len(self._slots) and self._slots[i] <= end and (limit is None or len(out) < limit)
        ):
            out.append(self._slots[i])
            i += 1
        return out

    def all_blocks(self) -> list[Block]:
        return [self._blocks[s] for s in self._slots]

    @property
    def first_slot(self) -> int:
        return self._slots[0]

    def blockhash_slot(self, blockhash: str) -> int | None:
        """The slot of a still-valid blockhash, or None if unknown or older than MAX_BLOCKHASH_AGE slots."""
        slot = self._recent.get(blockhash)
        if slot is None or slot < self.latest.slot - MAX_BLOCKHASH_AGE:
            return None
        return slot

    def slot_hashes(self) -> list[tuple[int, Hash]]:
        """The SlotHashes sysvar's content, newest first. As on a validator, a slot's own hash is not
        in it (it is only known once the slot ends): the newest entry is the previous block's."""
        latest = self.latest.slot
        return [
            (slot, Hash.from_string(h))
            for slot, h in reversed(self._recent_order)
            if slot != latest
        ]
