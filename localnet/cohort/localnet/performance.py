"""getRecentPerformanceSamples: transactions and slots per 60-second period, newest first."""

from __future__ import annotations

from collections import deque

SAMPLE_PERIOD_S = 60
MAX_SAMPLES = 720


class PerformanceSamples:
    def __init__(self, now: float, slot: int, transactions: int) -> None:
        self._start = (now, slot, transactions)
        self._samples: deque[dict[str, int]] = deque(maxlen=MAX_SAMPLES)

    def observe(self, now: float, slot: int, transactions: int) -> None:
        """Close the current period if it has lasted SAMPLE_PERIOD_S (called by the slot ticker)."""
        start_time, start_slot, start_tx = self._start
        if now - start_time < SAMPLE_PERIOD_S:
            return
        n = transactions - start_tx
        self._samples.appendleft(
            {
                "numNonVoteTransactions": n,
                "numSlots": slot - start_slot,
                "numTransactions": n,
                "samplePeriodSecs": int(now - start_time),
                "slot": slot,
            }
        )
        self._start = (now, slot, transactions)

    def samples(self, limit: int) -> list[dict[str, int]]:
        return list(self._samples)[:limit]
