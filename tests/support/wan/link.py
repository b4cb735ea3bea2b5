"""What an emulated access link does to packets (`Link`) and what it counted (`LinkStats`).

Shared by the bed (which validates and sends profiles) and the router (which applies them); both sides
exchange them as plain dicts over the router's control pipe.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

# Default bottleneck buffer when a rated link gives no `queue_bytes`: 200 ms worth at the rate (a
# typical access router), never below 64 KiB so one TCP window's burst at low rates still fits.
DEFAULT_QUEUE_SECONDS = 0.2
MIN_DEFAULT_QUEUE = 64 << 10
# Default token-bucket depth: 2 ms at the rate, at least two full-size packets (line-rate pairs).
DEFAULT_BURST_SECONDS = 0.002
MIN_DEFAULT_BURST = 3028


@dataclass(frozen=True)
class Link:
    """One direction of a node's access link.

    delay_ms: one-way propagation delay; jitter_ms: each packet's delay is drawn uniformly from
    delay ± jitter (clamped at 0, and never earlier than the link's previous packet: no reordering);
    loss: probability that a packet entering the link is dropped; rate_mbit: bottleneck rate in
    10^6 bit/s of IP bytes (None: unlimited); queue_bytes: bottleneck buffer, tail drop beyond it
    (None: 200 ms at the rate, at least 64 KiB); burst_bytes: token-bucket depth (None: 2 ms at the
    rate, at least 3028 bytes).
    """

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    rate_mbit: float | None = None
    queue_bytes: int | None = None
    burst_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("delay_ms", "jitter_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 60_000):
                raise ValueError(f"{name} must be within 0..60000, got {value!r}")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"loss is a probability (0..1), got {self.loss!r}")
        if self.rate_mbit is not None and not (
            math.isfinite(self.rate_mbit) and self.rate_mbit > 0
        ):
            raise ValueError(
                f"rate_mbit must be positive (or None: unlimited), got {self.rate_mbit!r}"
            )
        for name in ("queue_bytes", "burst_bytes"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value > 0):
                raise ValueError(f"{name} must be a positive int (or None: default), got {value!r}")

    @property
    def rate_bytes(self) -> float | None:
        """Bytes per second, or None when unlimited."""
        return None if self.rate_mbit is None else self.rate_mbit * 1e6 / 8

    def queue_limit(self) -> int:
        if self.queue_bytes is not None:
            return self.queue_bytes
        rate = self.rate_bytes or 0.0
        return max(MIN_DEFAULT_QUEUE, int(rate * DEFAULT_QUEUE_SECONDS))

    def burst(self) -> int:
        if self.burst_bytes is not None:
            return self.burst_bytes
        rate = self.rate_bytes or 0.0
        return max(MIN_DEFAULT_BURST, int(rate * DEFAULT_BURST_SECONDS))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Link:
        return cls(**data)


@dataclass(frozen=True)
class LinkStats:
    """Counters of one link direction since the router started.

    packets/bytes: what entered the link and was not dropped (IP bytes); dropped_loss: random loss;
    dropped_queue: tail drops at the bottleneck buffer, plus packets refused because the router's
    global memory cap was reached.
    """

    packets: int = 0
    bytes: int = 0
    dropped_loss: int = 0
    dropped_queue: int = 0
