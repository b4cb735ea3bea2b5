"""What the node served: JSON-RPC requests and bytes, websocket notifications and bytes. Read with the
`localnet_traffic` method (read-only, so not a cheat), e.g. by benchmarks that measure RPC load per client."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Traffic:
    requests: int = 0  # JSON-RPC calls over HTTP (a batch counts each of its calls)
    bytes_in: int = 0  # request bodies
    bytes_out: int = 0  # HTTP answers and websocket messages
    notifications: int = 0  # websocket messages sent
    by_method: Counter = field(default_factory=Counter)  # calls per method
    bytes_by_method: Counter = field(default_factory=Counter)  # answer bytes per method (HTTP)

    def as_dict(self) -> dict:
        return {"requests": self.requests, "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                "notifications": self.notifications, "by_method": dict(self.by_method),
                "bytes_by_method": dict(self.bytes_by_method)}  # fmt: skip
