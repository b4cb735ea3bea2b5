"""The shape of an RPC method handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..node import Node

# handler(node, params) -> result, or an awaitable of it (sendTransaction waits for the ledger)
Handler = Callable[["Node", Any], Any | Awaitable[Any]]
