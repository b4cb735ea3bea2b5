"""The JSON-RPC method table: one module per area, each exporting METHODS.

`CHEATS` (moving time, writing accounts, forcing a snapshot) are served only by a localnet started
with `--cheats`: any web page can POST to localhost, so they are off by default.
"""

from __future__ import annotations

from . import accounts, blocks, cheats, cluster, transactions
from .types import Handler

METHODS: dict[str, Handler] = {
    **cluster.METHODS,
    **accounts.METHODS,
    **transactions.METHODS,
    **blocks.METHODS,
}
CHEATS: dict[str, Handler] = dict(cheats.METHODS)


def method_table(cheats: bool) -> dict[str, Handler]:
    return {**METHODS, **CHEATS} if cheats else dict(METHODS)
