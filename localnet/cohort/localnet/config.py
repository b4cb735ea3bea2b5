"""What a localnet is started with, validated up front."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT = 8899
DEFAULT_SLOT_MS = 400
MAX_REQUEST_BYTES = 1024 * 1024  # larger HTTP bodies and websocket frames are refused
EXPLORER_ORIGIN = "https://explorer.solana.com"
DEFAULT_MAX_SUBSCRIPTIONS = 1024  # per websocket connection
DEFAULT_MAX_HISTORY = 50_000  # landed transactions kept in memory (and in snapshots)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class LocalnetConfig:
    """HTTP JSON-RPC on `port`, websocket pubsub on `port + 1` (where web3.js and solana-py look for it).

    `port=0` picks a free pair of adjacent ports at start. Without `ledger` the chain lives in memory only;
    with it, every confirmed transaction is fsync'd before the RPC answers and survives a crash.

    Web pages the developer opens are untrusted: `cheats` (localnet_warpTime, localnet_setAccount,
    localnet_snapshot) are off unless asked for; browsers may call only from `cors_origins` ("*" allows
    any); the Host header must name localhost or `host` (DNS rebinding). `max_subscriptions` bounds each
    websocket, `max_history` the landed transactions kept (older ones are forgotten once their
    blockhash has expired, so none can be replayed).
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ledger: Path | None = None
    reset: bool = False
    slot_ms: int = DEFAULT_SLOT_MS
    cheats: bool = False
    cors_origins: tuple[str, ...] = (EXPLORER_ORIGIN,)
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    max_history: int = DEFAULT_MAX_HISTORY

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not (self.port == 0 or 1 <= self.port <= 65534):
            raise ValueError(
                f"port must be 0 (any free pair) or 1..65534 (ws uses port+1), got {self.port!r}"
            )
        if not isinstance(self.slot_ms, int) or not 10 <= self.slot_ms <= 60_000:
            raise ValueError(f"slot_ms must be an integer from 10 to 60000, got {self.slot_ms!r}")
        if not self.host:
            raise ValueError("host must not be empty")
        object.__setattr__(self, "host", self.host.strip("[]"))  # "[::1]" as well as "::1"
        if isinstance(self.cors_origins, str):
            raise TypeError("cors_origins is a tuple of origins, not one string")
        origins = tuple(o.rstrip("/") for o in self.cors_origins)
        for origin in origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"a CORS origin looks like https://host[:port], got {origin!r}")
        object.__setattr__(self, "cors_origins", origins)
        if not isinstance(self.max_subscriptions, int) or self.max_subscriptions < 1:
            raise ValueError(f"max_subscriptions must be >= 1, got {self.max_subscriptions!r}")
        if not isinstance(self.max_history, int) or self.max_history < 1:
            raise ValueError(f"max_history must be >= 1, got {self.max_history!r}")
        if self.ledger is not None:
            object.__setattr__(self, "ledger", Path(self.ledger))
            if self.ledger.exists() and not self.ledger.is_dir():
                raise ValueError(f"ledger {self.ledger} exists and is not a directory")
        if self.reset and self.ledger is None:
            raise ValueError("--reset needs --ledger (an in-memory localnet always starts fresh)")


def exposure_warning(config: LocalnetConfig) -> str | None:
    """The warning to print when `config` listens beyond this machine (None on loopback)."""
    if is_loopback(config.host):
        return None
    cheats = ", cheats included (--cheats)" if config.cheats else ""
    return (
        f"LISTENING ON {config.host}, NOT LOOPBACK: anyone who can reach this address can use this"
        f" localnet{cheats}"
    )


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (a wildcard like 0.0.0.0 or :: is not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
