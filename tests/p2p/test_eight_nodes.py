"""Eight nodes on 127.0.0.1: announcements reach everyone exactly once, a 64 MB blob announced by
one node is fetched and verified by the other seven, and repair delivers a message that was
dropped on purpose."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from support.waiting import wait_until

from cohort.client.p2p import BlobFetcher, GossipConfig, blob_hash

N = 8
BLOB_BYTES = 64 << 20


def collect(nodes) -> list[list]:
    inboxes = [[] for _ in nodes]
    for node, inbox in zip(nodes, inboxes, strict=True):
        node.gossip.on_message = inbox.append
    return inboxes


async def test_every_announcement_reaches_every_node_exactly_once(start_nodes):
    nodes = await start_nodes(
        N, gossip=GossipConfig(repair_interval=0, rings=2)
    )  # degree 4: multi-hop
    inboxes = collect(nodes)
    per_node = 3
    sent = [
        await node.announce(1, f"{i}:{k}".encode())
        for k in range(per_node)
        for i, node in enumerate(nodes)
    ]
    await wait_until(lambda: all(len(inbox) >= (N - 1) * per_node for inbox in inboxes), timeout=20)
    for _ in range(3):  # repair rounds must not deliver anything twice
        await asyncio.gather(*(node.gossip.repair_now() for node in nodes))
    await asyncio.sleep(0.2)
    for node, inbox in zip(nodes, inboxes, strict=True):
        ids = Counter(m.id for m in inbox)
        assert max(ids.values()) == 1
        assert set(ids) == {a.id for a in sent if a.origin != node.transport.node_id}
    assert sum(node.gossip.stats.duplicates for node in nodes) > 0  # flooding did send copies


async def test_a_64mb_blob_reaches_the_other_seven(start_nodes):
    nodes = await start_nodes(N, gossip=GossipConfig(repair_interval=0))
    inboxes = collect(nodes)
    data = os.urandom(BLOB_BYTES)
    origin = nodes[0]
    h = origin.add_blob(data, round=1)
    await origin.announce(1, h)
    await wait_until(lambda: all(inbox for inbox in inboxes[1:]), timeout=20)

    async def fetch(node, inbox):
        (announcement,) = inbox
        providers = node.providers_for(announcement.origin)
        assert providers[0].node_id == announcement.origin
        return await node.fetch_blob(announcement.payload, providers, round=1)

    fetched = await asyncio.gather(
        *(fetch(n, i) for n, i in zip(nodes[1:], inboxes[1:], strict=True))
    )
    assert all(len(f) == BLOB_BYTES and blob_hash(f) == h for f in fetched)
    assert all(h in node.store for node in nodes)
    origin.store.gc(before_round=2)  # the announcer is done with it; the fetchers serve it now
    again = await BlobFetcher(origin.transport).fetch(
        h, origin.providers_for(nodes[3].transport.node_id)
    )
    assert blob_hash(again) == h


async def test_repair_delivers_a_dropped_message(start_nodes):
    nodes = await start_nodes(N, gossip=GossipConfig(repair_interval=0.3))
    inboxes = collect(nodes)
    origin, late = nodes[0], nodes[5]
    everyone = [n.address for n in nodes]
    late.set_clients(
        [a for a in everyone if a.node_id != origin.address.node_id]
    )  # stale client list
    await origin.announce(2, b"while node 5 was not listening")
    await wait_until(lambda: all(len(inboxes[i]) == 1 for i in range(1, N) if i != 5), timeout=20)
    await asyncio.sleep(0.5)
    assert inboxes[5] == []  # dropped: pushes from and for the unknown origin were refused
    late.set_clients(everyone)  # the next epoch's list arrives; the repair loop catches up
    await wait_until(lambda: len(inboxes[5]) == 1, timeout=10)
    assert inboxes[5][0].payload == b"while node 5 was not listening"
    await asyncio.sleep(0.7)  # a couple more repair rounds: still exactly once everywhere
    assert all(len(inbox) == 1 for inbox in inboxes[1:])
    assert late.gossip.stats.repaired >= 1
