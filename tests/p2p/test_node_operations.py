"""What a training client asks of its P2P node (P2PNode's own operations, not its parts): blobs held and
collected, a directory served from disk, copies served, the counters it reports; two real nodes on 127.0.0.1."""

from __future__ import annotations

import os

from support.waiting import wait_until

from cohort.client.p2p import NodeStats
from cohort.client.p2p.manifest import Manifest


async def test_a_nodes_blobs_copies_and_counters(start_nodes):
    a, b = await start_nodes(2)
    data = os.urandom(300_000)
    h = a.add_blob(data, round=3)
    assert a.blob(h) == data and b.blob(h) is None
    assert await b.fetch_blob(h, [a.address]) == data  # without a round: not kept
    assert b.blob(h) is None
    assert await b.fetch_blob(h, [a.address], round=4) == data
    assert b.blob(h) == data
    await wait_until(lambda: a.copies_served(h) == 2, timeout=5)
    assert b.copies_served(h) == 0
    sent, received = a.stats(), b.stats()
    assert isinstance(sent, NodeStats)
    assert sent.uploaded >= 2 * len(data) and sent.sent >= sent.uploaded
    assert received.received >= 2 * len(data) and received.requests >= 2
    assert all(count > 0 for count in sent.gossip_trouble.values())
    assert b.collect(before_round=4) == 0 and b.blob(h) == data
    assert b.collect(before_round=5) == 1 and b.blob(h) is None


async def test_a_directory_kept_until_its_round_is_collected(start_nodes, tmp_path):
    (a,) = await start_nodes(1)
    root = tmp_path / "state"
    root.mkdir()
    (root / "part.bin").write_bytes(os.urandom(10_000))
    manifest = Manifest.of_directory(root, 4096)
    h = a.keep_directory(root, manifest, round=7)
    assert h == manifest.hash() and a.blob(h) == manifest.encode()
    assert a.collect(before_round=8) >= 1 and a.blob(h) is None and not root.exists()
