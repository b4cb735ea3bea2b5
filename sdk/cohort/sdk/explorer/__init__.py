"""The run explorer: an indexer that follows coordinator programs into SQLite, and a web app over it.

`Explorer` loads on first use (PEP 562): `cohort --help` imports the command (cli.py), which should not pay
for the web server and the RPC client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Explorer

__all__ = ["DEFAULT_PORT", "Explorer"]

DEFAULT_PORT = 8080  # the explorer's HTTP port


def __getattr__(name: str) -> Any:
    if name != "Explorer":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .app import Explorer

    globals()["Explorer"] = Explorer  # once loaded, a plain attribute
    return Explorer
