"""What a localnet is started with, validated up front."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT = 8899
DEFAULT_SLOT_MS = 400
MAX_REQUEST_BYTES = 1024 * 1024  # larger HTTP bodies and websocket frames are refused


@dataclass(frozen=True)
class LocalnetConfig:
    """HTTP JSON-RPC on `port`, websocket pubsub on `port + 1` (where web3.js and solana-py look for it).

    `port=0` picks a free pair of adjacent ports at start. Without `ledger` the chain lives in memory only;
    with it, every confirmed transaction is fsync'd before the RPC answers and survives a crash.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ledger: Path | None = None
    reset: bool = False
    slot_ms: int = DEFAULT_SLOT_MS

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not (self.port == 0 or 1 <= self.port <= 65534):
            raise ValueError(
                f"port must be 0 (any free pair) or 1..65534 (ws uses port+1), got {self.port!r}"
            )
        if not isinstance(self.slot_ms, int) or not 10 <= self.slot_ms <= 60_000:
            raise ValueError(f"slot_ms must be an integer from 10 to 60000, got {self.slot_ms!r}")
        if not self.host:
            raise ValueError("host must not be empty")
        if self.ledger is not None:
            object.__setattr__(self, "ledger", Path(self.ledger))
            if self.ledger.exists() and not self.ledger.is_dir():
                raise ValueError(f"ledger {self.ledger} exists and is not a directory")
        if self.reset and self.ledger is None:
            raise ValueError("--reset needs --ledger (an in-memory localnet always starts fresh)")
