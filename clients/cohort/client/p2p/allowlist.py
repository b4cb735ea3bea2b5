"""Which nodes may talk to us: the node ids of the run's current client list.

Transports check the authenticated remote id against it on every connection and every request, so an
update (a new epoch's client list) takes effect at once, also on connections already open. The addresses the
members advertised come with it: a node id is known only once a handshake completed, an address before, so a
transport lets a member's address through a flood of strangers' handshakes (`IrohTransport`).
"""

from __future__ import annotations

from collections.abc import Iterable

from .identity import NodeId


class Allowlist:
    """A mutable set of node ids, shared by reference between a node's transport and protocols."""

    def __init__(self, node_ids: Iterable[NodeId] = ()) -> None:
        self._ids: frozenset[NodeId] = frozenset()
        self.addresses: frozenset[str] = (
            frozenset()
        )  # the members' advertised direct "host:port" addresses
        self.version = 0
        self.replace(node_ids)

    def replace(self, node_ids: Iterable[NodeId], addresses: Iterable[str] = ()) -> None:
        """Swap in a new client list and the addresses its members advertised (in place: every holder of
        this object sees it)."""
        ids = frozenset(node_ids)
        for node_id in ids:
            if not isinstance(node_id, NodeId):
                raise TypeError(f"allowlist entries are NodeId, got {type(node_id).__name__}")
        self._ids = ids
        self.addresses = frozenset(addresses)
        self.version += 1

    def allows(self, node_id: NodeId) -> bool:
        return node_id in self._ids

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._ids

    def __iter__(self):
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"Allowlist({len(self._ids)} nodes, version {self.version})"
