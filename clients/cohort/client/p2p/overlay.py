"""The gossip overlay: a sparse graph every node derives alone from the run's client list.

Each of `rings` rings orders the members by sha256(topic ‖ ring ‖ node id); a node's neighbours are
its predecessor and successor on every ring, so the degree is at most 2 × rings (8 by default), the
graph is undirected (if B follows A, A precedes B) and its diameter stays near log(N). No membership
protocol is needed: the same inputs give the same graph on every node. Small runs use a full mesh.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable

from .identity import NodeId

DEFAULT_RINGS = 4


def ring_order(members: Iterable[NodeId], topic: bytes, ring: int) -> list[NodeId]:
    return sorted(
        set(members), key=lambda n: hashlib.sha256(topic + bytes([ring]) + n.key).digest()
    )


def neighbours(
    me: NodeId,
    members: Collection[NodeId],
    topic: bytes,
    *,
    rings: int = DEFAULT_RINGS,
    exclude: Collection[NodeId] = (),
) -> set[NodeId]:
    """The nodes `me` exchanges gossip with. `exclude` (peers that just failed) are skipped over, so
    the next node on that ring takes their place."""
    if not 1 <= rings <= 255:
        raise ValueError("rings must be 1..255")
    live = {n for n in members if n not in exclude} | {me}
    if len(live) - 1 <= 2 * rings:
        return live - {me}
    result: set[NodeId] = set()
    for ring in range(rings):
        order = ring_order(live, topic, ring)
        i = order.index(me)
        result.add(order[i - 1])
        result.add(order[(i + 1) % len(order)])
    result.discard(me)
    return result
