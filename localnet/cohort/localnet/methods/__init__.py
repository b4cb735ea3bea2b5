"""The JSON-RPC method table: one module per area, each exporting METHODS."""

from __future__ import annotations

from . import accounts, blocks, cheats, cluster, transactions
from .types import Handler

METHODS: dict[str, Handler] = {
    **cluster.METHODS,
    **accounts.METHODS,
    **transactions.METHODS,
    **blocks.METHODS,
    **cheats.METHODS,
}
