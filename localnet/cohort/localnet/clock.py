"""Validator time: slots advance with the wall clock, Clock.unix_timestamp follows real time.

Pure arithmetic over the two clocks it is given (monotonic for slots, wall for timestamps), so the rules are
testable without sleeping. A warp moves both forward together; nothing ever moves backwards, across restarts
included.
"""

from __future__ import annotations

from dataclasses import dataclass

SLOTS_PER_EPOCH = 432_000  # mainnet's EpochSchedule, without warmup


@dataclass
class SlotClock:
    slot_ms: int
    base_slot: int  # the slot at `base_mono`
    base_mono: float  # monotonic seconds when `base_slot` began
    time_offset: float = 0.0  # seconds added to wall time by warps (kept across restarts)
    warp_slots: int = 0  # slots added by warps and forced advances since `base_mono`
    min_unix: int = 0  # unix time never reported below this (a restart must not go back in time)

    def slot(self, mono: float) -> int:
        elapsed_ms = max(0.0, mono - self.base_mono) * 1000.0
        return self.base_slot + int(elapsed_ms // self.slot_ms) + self.warp_slots

    def unix_timestamp(self, wall: float) -> int:
        return max(self.min_unix, int(wall + self.time_offset))

    def warp(self, seconds: float) -> int:
        """Move time forward by `seconds` (and the slot by as many slots); returns the slots skipped."""
        if not seconds >= 0:
            raise ValueError(f"time only moves forward: seconds must be >= 0, got {seconds!r}")
        slots = int(seconds * 1000 // self.slot_ms)
        self.time_offset += seconds
        self.warp_slots += slots
        return slots

    def bump(self) -> None:
        """Start the next slot now (used when the current slot's blockhash must change early)."""
        self.warp_slots += 1

    @classmethod
    def resume(
        cls, slot_ms: int, last_slot: int, time_offset: float, last_unix: int, mono: float
    ) -> SlotClock:
        """After a restart: the next slot follows the last one; time continues forward from real time."""
        return cls(slot_ms, last_slot + 1, mono, time_offset, 0, last_unix)


def epoch_of(slot: int) -> tuple[int, int]:
    """(epoch, slot index within it) under an EpochSchedule without warmup."""
    return divmod(slot, SLOTS_PER_EPOCH)
