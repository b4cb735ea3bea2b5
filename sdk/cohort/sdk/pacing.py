"""How fast a bulk sender (the deploy's writes) goes, adapted to the cluster's rate limit.

Two knobs, both additive increase / multiplicative decrease as in TCP: the window (requests in flight) and,
once the cluster has answered HTTP 429, a pace (requests started per second). A public RPC limits requests
per second, which a window alone cannot honour when each request is quick, so the first 429 sets the pace to
half the rate just sent at; each later one halves it again (at most once per `cooldown` seconds, since a
burst sent at the old pace comes back throttled together), and every success adds a little back (the pace
grows by a tenth each second).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

MIN_RATE = 0.5  # requests per second: the pace never drops below this
GROWTH = (
    0.1  # requests per second added per request that went through: +10% of the pace each second
)


class AdaptiveLimit:
    def __init__(
        self,
        start: int,
        *,
        minimum: int = 1,
        maximum: int | None = None,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= minimum <= start:
            raise ValueError(f"need 1 <= minimum <= start, got minimum={minimum} start={start}")
        self.limit = start
        self.minimum = minimum
        self.maximum = max(start, maximum or start)
        self.lowest = start  # the smallest window used so far (what the cluster's limit forced)
        self.throttles = 0
        self.cooldown = cooldown
        self._clock = clock
        self._last_decrease = -float("inf")
        self._successes = 0
        self._in_flight = 0
        self._changed: asyncio.Condition | None = None
        self.rate: float | None = None  # requests per second once throttled (None: unpaced)
        self.lowest_rate: float | None = None
        self._started: deque[float] = deque()  # start times of the last second's requests
        self._next_start = 0.0

    # -- the pure core ---------------------------------------------------------------------------------
    def throttled(self) -> None:
        """The cluster said slow down (HTTP 429)."""
        self.throttles += 1
        now = self._clock()
        if now - self._last_decrease < self.cooldown:
            return
        self._last_decrease = now
        self.limit = max(self.minimum, self.limit // 2)
        self.lowest = min(self.lowest, self.limit)
        self._successes = 0
        self._forget_before(now - 1.0)
        sent_at = self.rate if self.rate is not None else float(len(self._started) or 1)
        self.rate = max(MIN_RATE, sent_at / 2)
        self.lowest_rate = (
            self.rate if self.lowest_rate is None else min(self.lowest_rate, self.rate)
        )

    def succeeded(self) -> None:
        """One item of the bulk (a write) went through: the window grows by one per window's worth."""
        self._successes += 1
        if self._successes >= self.limit and self.limit < self.maximum:
            self.limit += 1
            self._successes = 0

    def request_done(self) -> None:
        """One request went through: the pace creeps back up (by GROWTH of itself each second)."""
        if self.rate is not None:
            self.rate += GROWTH

    def delay(self) -> float:
        """Seconds to wait before the next request may start (and reserve that start)."""
        now = self._clock()
        start = now if self.rate is None else max(now, self._next_start)
        if self.rate is not None:
            self._next_start = start + 1 / self.rate
        self._started.append(start)
        self._forget_before(now - 1.0)
        return start - now

    def _forget_before(self, moment: float) -> None:
        while self._started and self._started[0] < moment:
            self._started.popleft()

    # -- the async shell -------------------------------------------------------------------------------
    async def pace(self) -> None:
        """Wait until the next request may start (every request of the bulk, retries included)."""
        wait = self.delay()
        if wait > 0:
            await asyncio.sleep(wait)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the window's slots while the body runs."""
        if self._changed is None:
            self._changed = asyncio.Condition()
        changed = self._changed
        async with changed:
            await changed.wait_for(lambda: self._in_flight < self.limit)
            self._in_flight += 1
        try:
            yield
        finally:
            async with changed:
                self._in_flight -= 1
                changed.notify_all()
