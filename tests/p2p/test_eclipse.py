"""Eclipse attempts on the gossip overlay: ground node keys, and neighbours that swallow everything."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from cohort.client.p2p import GossipConfig, NodeKey, P2PNode, PeerAddress, gossip_topic
from cohort.client.p2p.overlay import DEFAULT_RINGS, neighbours, ring_order, ring_seed

TOPIC = gossip_topic("test-run")


def key(i: int):
    """A fixed node key: the test is one instance, not a draw (a random one may give the victim a
    neighbour gap so narrow that grinding into it takes more than the budget)."""
    return NodeKey(hashlib.sha256(b"eclipse-test" + i.to_bytes(4, "little")).digest()).node_id


def honest_slots(victim, members: list, attackers: set, seed: bytes) -> int:
    """How many of the victim's (ring, side) neighbour slots an honest node holds."""
    held = 0
    for ring in range(DEFAULT_RINGS):
        order = ring_order(members, seed, ring)
        i = order.index(victim)
        held += (order[i - 1] not in attackers) + (order[(i + 1) % len(order)] not in attackers)
    return held


def grind(victim, honest: list, seed: bytes, budget: int = 20_000) -> list:
    """Keys an attacker can make offline so that they take all of the victim's neighbour slots.

    Counted in slots, not nodes: one honest node may hold slots on two rings, and a key that takes
    only one of them still brings the eclipse a slot closer."""
    attackers: list = []
    left = honest_slots(victim, honest, set(), seed)
    for i in range(budget):
        candidate = key(10_000 + i)
        after = honest_slots(
            victim, honest + attackers + [candidate], {*attackers, candidate}, seed
        )
        if after < left:
            attackers.append(candidate)
            left = after
            if left == 0:
                return attackers
    raise AssertionError("grinding did not finish within its budget")


def test_ground_keys_eclipse_the_public_overlay_but_not_a_keyed_one():
    honest = [key(i) for i in range(60)]
    victim = honest[0]
    attackers = grind(victim, honest, ring_seed(TOPIC))  # the topic is public at join time
    members = honest + attackers
    assert neighbours(victim, members, ring_seed(TOPIC)) <= set(attackers)  # eclipsed
    for round_seed in range(5):  # the epoch's round seed did not exist when the keys were ground
        keyed = neighbours(victim, members, ring_seed(TOPIC, round_seed.to_bytes(8, "little")))
        assert len(keyed - set(attackers)) >= 4
    assert ring_seed(TOPIC, b"k") != ring_seed(TOPIC, b"k2") != ring_seed(TOPIC)
    with pytest.raises(ValueError, match="overlay_key"):
        ring_seed(TOPIC, b"")


async def test_set_clients_keys_the_overlay():
    nodes = [P2PNode.http(NodeKey.generate(), "test-run") for _ in range(20)]
    peers = [PeerAddress(n.transport.node_id, (f"127.0.0.1:{i + 1}",)) for i, n in enumerate(nodes)]
    ids = [p.node_id for p in peers]
    me = nodes[0]
    key = (123456789).to_bytes(8, "little")
    me.set_clients(peers, overlay_key=key)
    got = {p.node_id for p in me.gossip.neighbours()}
    assert got == neighbours(ids[0], ids, ring_seed(TOPIC, key))
    me.set_clients(peers)  # no key: the public ordering, as before
    assert {p.node_id for p in me.gossip.neighbours()} == neighbours(ids[0], ids, TOPIC)
    with pytest.raises(ValueError, match="overlay_key"):
        me.set_clients(peers[:3], overlay_key=b"x" * 65)
    assert len(me.transport.allowlist) == 20  # a refused call changed nothing


async def test_a_large_run_pushes_over_the_first_rings_and_repairs_over_all():
    nodes = [P2PNode.http(NodeKey.generate(), "test-run") for _ in range(20)]
    peers = [PeerAddress(n.transport.node_id, (f"127.0.0.1:{i + 1}",)) for i, n in enumerate(nodes)]
    ids = [p.node_id for p in peers]
    me = nodes[0]
    me.set_clients(peers)
    pushed = {p.node_id for p in me.gossip.push_targets()}
    assert pushed == neighbours(ids[0], ids, TOPIC, rings=2)  # the first two rings: degree <= 4
    assert pushed < {p.node_id for p in me.gossip.neighbours()}  # the others only exchange digests
    me.set_clients(peers[:6])  # a small run is a full mesh: everyone is pushed to
    assert me.gossip.push_targets() == me.gossip.neighbours() and len(me.gossip.neighbours()) == 5
    with pytest.raises(ValueError, match="push_rings"):
        GossipConfig(push_rings=0)


def swallow(node: P2PNode) -> None:
    """Make `node` a member that accepts every push and digest but never passes anything on."""

    def ingest(announcement, sender):
        return False

    async def answer_digest(body, reply):
        await reply.write(b"")

    node.gossip._ingest = ingest
    node.gossip._answer_digest = answer_digest


@pytest.mark.parametrize("kind", ["http"])
async def test_repair_replaces_silent_neighbours(start_nodes):
    config = GossipConfig(rings=1, repair_interval=0.15, suspect_for=60)
    nodes = await start_nodes(8, gossip=config)
    victim = nodes[0]
    silent = {p.node_id for p in victim.gossip.neighbours()}
    assert len(silent) == 2
    for node in nodes:
        if node.transport.node_id in silent:
            swallow(node)
    honest = [n for n in nodes[1:] if n.transport.node_id not in silent]
    got = []
    victim.gossip.on_message = got.append
    async with asyncio.timeout(20):
        for i in range(200):
            await honest[i % len(honest)].announce(1, f"m{i}".encode())
            await asyncio.sleep(0.05)
            now = {p.node_id for p in victim.gossip.neighbours()}
            if got and not now & silent:
                break
    assert got, "the probe pull did not reach around the silent neighbours"
    assert not {p.node_id for p in victim.gossip.neighbours()} & silent
    assert victim.gossip.stats.silent_suspected >= 2
    assert all(set(n.gossip._suspects) <= silent for n in nodes)  # nobody honest was blamed
