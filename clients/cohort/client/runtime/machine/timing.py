"""How long the machine waits for things."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """How long the client waits for things (seconds of its own clock)."""

    ready_every: float = (
        1.0  # Ready is re-announced during Warmup after this, then twice as long each
    )
    ready_every_max: float = (
        10.0  # time, up to this (a long Warmup must not use up the per-round gossip cap)
    )
    tick_turn: float = 0.4  # a due tick waits this long per position before this client sends it
    tick_retry: float = (
        0.2  # a tick that landed in the freeze slot itself (SeedPending) is resent soon
    )
    fetch_retry: float = 0.5  # a failed fetch is tried again (other holders) after at most this
    resubmit_every: float = 1.0  # an undecided round's record is replaced at most this often
    tx_retry: float = 1.0

    @staticmethod
    def witness_grace(max_round_train_time: int) -> float:
        """How long a seat waits for the rest once a majority of the expected results is in hand: long
        enough for a slow honest trainer, short enough that withholding costs little (config-derived). The
        epoch's first step (fresh processes, cold caches) is waited for until the training time is up."""
        return max(2.0, max_round_train_time / 3)

    # An announced result is ready: a seat waits for it the time its serving takes from its announcement
    # (`serve_time`), never more than this many graces after the majority. A trainer that announces at once
    # and serves late is left out after that and reported late (the health rule then drops it): it costs
    # a round about its serve time, not the round's training time.
    ANNOUNCED_GRACES = 3
    # (measured at 120 ms one way and 1% loss: a 176 KB result took 1.7 s median, 1.8 s at worst; here 4.1 s.
    # Between two members each behind such a link, 240 ms one way and ~2% loss, a 31 KB result took 0.9-1.6 s
    # and, on a connection in loss recovery, 2.3-3.2 s: at 2 s an honest member was dropped as late)
    serve_grace: float = (
        3.0  # an announced result's fetch: connecting, asking, a busy first holder, loss
    )
    serve_rate: float = (
        256 << 10
    )  # bytes/s every member serves a result at, at least (the fetchers' min_rate)
    SERVE_HOPS = (
        3  # from its author or from one of its first fetchers (the author's copies are limited)
    )

    def serve_time(self, size: int) -> float:
        """How long after its announcement a result of `size` bytes is late at a seat."""
        return self.serve_grace + self.SERVE_HOPS * size / self.serve_rate

    @staticmethod
    def fetch_deadline(max_round_train_time: int) -> float:
        """How long a decided result may take to obtain before we leave rather than diverge."""
        return max(15.0, 2.0 * max_round_train_time)
