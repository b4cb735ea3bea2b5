"""The gossip overlay: a sparse graph every node derives alone from the run's client list.

Each of `rings` rings orders the members by sha256(seed ‖ ring ‖ node id); a node's neighbours are
its predecessor and successor on every ring, so the degree is at most 2 × rings (8 by default), the
graph is undirected (if B follows A, A precedes B) and its diameter stays near log(N). No membership
protocol is needed: the same inputs give the same graph on every node. Small runs use a full mesh.

The seed is the run's gossip topic mixed with an overlay key nobody knew when the members chose
their node keys (the client passes the epoch's first round seed). With the public topic alone, a
member could grind a handful of keys that land next to a victim on every ring and take all of its
neighbour slots (an eclipse).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable

from .identity import NodeId

DEFAULT_RINGS = 4
MAX_OVERLAY_KEY = 64
_SEED_TAG = b"cohort/overlay/v1"


def ring_seed(topic: bytes, overlay_key: bytes | None = None) -> bytes:
    """What ring positions are hashed from: the topic alone, or the topic keyed by `overlay_key`."""
    if overlay_key is None:
        return topic
    if not isinstance(overlay_key, bytes) or not 1 <= len(overlay_key) <= MAX_OVERLAY_KEY:
        raise ValueError(f"overlay_key must be 1..{MAX_OVERLAY_KEY} bytes, got {overlay_key!r:.80}")
    return hashlib.sha256(_SEED_TAG + topic + bytes([len(overlay_key)]) + overlay_key).digest()


def ring_order(members: Iterable[NodeId], seed: bytes, ring: int) -> list[NodeId]:
    return sorted(set(members), key=lambda n: hashlib.sha256(seed + bytes([ring]) + n.key).digest())


def neighbours(
    me: NodeId,
    members: Collection[NodeId],
    seed: bytes,
    *,
    rings: int = DEFAULT_RINGS,
    exclude: Collection[NodeId] = (),
) -> set[NodeId]:
    """The nodes `me` exchanges gossip with (`seed` from `ring_seed`). `exclude` (peers that just
    failed or stayed silent) are skipped over, so the next node on that ring takes their place."""
    if not 1 <= rings <= 255:
        raise ValueError("rings must be 1..255")
    live = {n for n in members if n not in exclude} | {me}
    if len(live) - 1 <= 2 * rings:
        return live - {me}
    result: set[NodeId] = set()
    for ring in range(rings):
        order = ring_order(live, seed, ring)
        i = order.index(me)
        result.add(order[i - 1])
        result.add(order[(i + 1) % len(order)])
    result.discard(me)
    return result
