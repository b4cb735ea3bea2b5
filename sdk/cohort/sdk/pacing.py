"""How many requests a bulk sender (the deploy's writes) keeps in flight, adapted to the cluster's rate limit.

Additive increase, multiplicative decrease, as TCP does: the window grows by one after a window's worth of
successes and halves when the cluster answers HTTP 429 — at most once per `cooldown` seconds, since one burst
of requests sent at the old window comes back throttled together.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


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

    def succeeded(self) -> None:
        """One request of the bulk went through."""
        self._successes += 1
        if self._successes >= self.limit and self.limit < self.maximum:
            self.limit += 1
            self._successes = 0

    # -- the async shell -------------------------------------------------------------------------------
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
