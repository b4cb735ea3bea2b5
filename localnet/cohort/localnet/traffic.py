"""What the node served: JSON-RPC requests and bytes, websocket notifications and bytes. Read with the
`localnet_traffic` method (read-only, so not a cheat), e.g. by benchmarks that measure RPC load per client."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Traffic:
    requests: int = 0  # JSON-RPC calls over HTTP (a batch counts each of its calls)
    bytes_in: int = 0  # request bodies
    bytes_out: int = 0  # HTTP answers and websocket messages
    notifications: int = 0  # websocket messages sent

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
