"""The packet model of one link direction, pure (no I/O, time passed in), so it can be unit-tested
without root.

A packet entering at time t is dropped at random (loss), then waits in a FIFO bottleneck drained by a
token bucket (rate, burst) whose buffer holds at most `queue_limit` bytes not yet sent (tail drop),
then travels for delay ± jitter. The FIFO is solved in closed form at admission time: each packet's
departure follows from the previous one's, so no timer per queue is needed, only the router's heap.
"""

from __future__ import annotations

import random
from collections import deque

from .link import Link, LinkStats


class Pipe:
    def __init__(self, link: Link, rng: random.Random) -> None:
        self._rng = rng
        self._backlog: deque[tuple[float, int]] = deque()  # (departure, size), not yet departed
        self._queued = 0  # bytes in _backlog
        self._tb_time = 0.0  # time of the last computed departure
        self._tb_tokens = 0.0  # tokens left at _tb_time
        self._last_arrival = 0.0
        self._last_due = 0.0  # keeps due times monotonic: jitter never reorders
        self.packets = self.bytes = self.dropped_loss = self.dropped_queue = 0
        self.set(link)

    def set(self, link: Link) -> None:
        """Change the profile; packets already admitted keep their computed times."""
        self.link = link
        self._rate = link.rate_bytes
        self._burst = float(link.burst())
        self._limit = link.queue_limit()
        self._delay = link.delay_ms / 1000
        self._jitter = link.jitter_ms / 1000
        self._tb_tokens = min(self._tb_tokens, self._burst)

    def admit(self, now: float, size: int) -> float | None:
        """When a packet of `size` IP bytes entering at `now` reaches the far end; None if dropped."""
        now = max(now, self._last_arrival)  # tolerate callers a fraction of a ms out of order
        self._last_arrival = now
        if self.link.loss and self._rng.random() < self.link.loss:
            self.dropped_loss += 1
            return None
        departure = now if self._rate is None else self._depart(now, size)
        if departure is None:
            self.dropped_queue += 1
            return None
        due = departure + self._delay
        if self._jitter:
            due = max(departure, due + self._rng.uniform(-self._jitter, self._jitter))
        due = max(due, self._last_due)
        self._last_due = due
        self.packets += 1
        self.bytes += size
        return due

    def _depart(self, now: float, size: int) -> float | None:
        backlog = self._backlog
        while backlog and backlog[0][0] <= now:
            self._queued -= backlog.popleft()[1]
        if self._queued + size > self._limit:
            return None
        assert self._rate is not None
        start = max(now, self._tb_time)
        tokens = min(self._burst, self._tb_tokens + (start - self._tb_time) * self._rate)
        if tokens >= size:
            departure, tokens = start, tokens - size
        else:  # wait until the bucket holds the whole packet, which empties it
            departure, tokens = start + (size - tokens) / self._rate, 0.0
        self._tb_time, self._tb_tokens = departure, tokens
        if departure > now:
            backlog.append((departure, size))
            self._queued += size
        return departure

    def refuse(self) -> None:
        """Count a packet the router could not hold (global memory cap) as a queue drop."""
        self.dropped_queue += 1

    def stats(self) -> LinkStats:
        return LinkStats(self.packets, self.bytes, self.dropped_loss, self.dropped_queue)
