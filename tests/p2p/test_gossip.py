"""Gossip pieces: the overlay, the announcement format, and bad input to the gossip protocols."""

from __future__ import annotations

import asyncio
import os
import random
import struct

import pytest

from cohort.client.p2p import (
    Announcement,
    GossipConfig,
    NodeKey,
    PeerAddress,
    RemoteError,
    Status,
    gossip_topic,
)
from cohort.client.p2p.announcement import MAX_ANNOUNCEMENT, MAX_PAYLOAD
from cohort.client.p2p.gossip import (
    DIGEST_PROTOCOL,
    MAX_PUSH_REQUEST,
    PUSH_PROTOCOL,
    push_body,
    repair_frames,
)
from cohort.client.p2p.overlay import neighbours

TOPIC = gossip_topic("test-run")


async def arrived(got: list, seconds: float = 4.0) -> None:
    """Wait (bounded) until something was delivered into `got`."""
    for _ in range(int(seconds / 0.02)):
        if got:
            return
        await asyncio.sleep(0.02)


def test_overlay_is_sparse_symmetric_connected_and_shared():
    ids = [NodeKey.generate().node_id for _ in range(64)]
    graph = {n: neighbours(n, ids, TOPIC) for n in ids}
    shuffled = random.sample(ids, len(ids))
    assert all(
        neighbours(n, shuffled, TOPIC) == graph[n] for n in ids
    )  # every node derives the same
    assert all(2 <= len(nb) <= 8 for nb in graph.values())
    assert all(a in graph[b] for a in ids for b in graph[a])  # undirected
    reached, frontier, hops = {ids[0]}, {ids[0]}, 0
    while frontier and hops < 64:
        frontier = {m for n in frontier for m in graph[n]} - reached
        reached |= frontier
        hops += 1
    assert reached == set(ids) and hops <= 6
    assert neighbours(ids[0], ids[:5], TOPIC) == set(ids[1:5])  # small runs: full mesh
    gone = next(iter(graph[ids[0]]))
    assert gone not in neighbours(ids[0], ids, TOPIC, exclude={gone})
    assert neighbours(ids[0], ids, gossip_topic("other-run")) != graph[ids[0]]


def test_announcement_round_trip_and_signature():
    key = NodeKey.generate()
    a = Announcement.create(key, TOPIC, 7, 3, b"payload")
    wire = a.encode()
    b = Announcement.decode(wire)
    assert b == a and b.id == a.id and b.verify(TOPIC)
    assert not b.verify(gossip_topic("another run"))  # no replay across runs
    tampered = bytearray(wire)
    tampered[-70] ^= 1  # inside the payload
    assert not Announcement.decode(bytes(tampered)).verify(TOPIC)
    full = Announcement.create(key, TOPIC, 1, 0, b"x" * MAX_PAYLOAD)
    assert len(full.encode()) == MAX_ANNOUNCEMENT


def test_announcement_bad_input():
    key = NodeKey.generate()
    wire = Announcement.create(key, TOPIC, 1, 0, b"abc").encode()
    with pytest.raises(ValueError, match="shorter"):
        Announcement.decode(wire[:50])
    with pytest.raises(ValueError, match="exceeds"):
        Announcement.decode(b"\x01" * (MAX_ANNOUNCEMENT + 1))
    with pytest.raises(ValueError, match="version"):
        Announcement.decode(b"\x09" + wire[1:])
    with pytest.raises(ValueError, match="payload length"):
        Announcement.decode(wire + b"extra")
    with pytest.raises(ValueError, match="exceeds"):
        Announcement.create(key, TOPIC, 1, 0, b"x" * (MAX_PAYLOAD + 1))
    with pytest.raises(ValueError, match="u64"):
        Announcement.create(key, TOPIC, -1, 0, b"")
    with pytest.raises(ValueError, match="topic"):
        Announcement.create(key, b"short", 1, 0, b"")
    with pytest.raises(ValueError):
        GossipConfig(retain_rounds=-1)


async def test_bad_gossip_input_is_refused_and_the_node_keeps_going(start_nodes, make_transport):
    a, b, c = await start_nodes(3, gossip=GossipConfig(repair_interval=0))
    got = []
    c.gossip.on_message = got.append
    outsider = NodeKey.generate()  # signs fine, but is not a member of the run

    async def push(body: bytes) -> Status:
        try:
            async with a.transport.request(b.address, PUSH_PROTOCOL, body) as reply:
                await reply.read()
        except RemoteError as e:
            return e.status
        return Status.OK

    valid = Announcement.create(a.transport.key, TOPIC, 1, 0, b"ok").encode()
    forged = valid[:-64] + os.urandom(64)
    assert await push(os.urandom(300)) == Status.BAD_REQUEST
    assert await push(b"") == Status.BAD_REQUEST
    assert await push(push_body([forged])) == Status.BAD_REQUEST
    assert await push(push_body([valid])[:-1]) == Status.BAD_REQUEST  # ends inside its frame
    outsiders = Announcement.create(outsider, TOPIC, 1, 0, b"hi").encode()
    assert await push(push_body([outsiders])) == Status.FORBIDDEN
    wrong_topic = Announcement.create(a.transport.key, gossip_topic("x"), 1, 0, b"").encode()
    assert await push(push_body([wrong_topic])) == Status.BAD_REQUEST
    assert await push(b"\x01" * (MAX_PUSH_REQUEST + 1)) == Status.TOO_LARGE
    assert b.gossip.stats.rejected == 6 and b.gossip.stats.delivered == 0

    for body in (b"1234567", struct.pack(">Q", 0) + b"12345"):
        with pytest.raises(RemoteError) as e:
            async with a.transport.request(b.address, DIGEST_PROTOCOL, body):
                pass
        assert e.value.status == Status.BAD_REQUEST

    await a.announce(1, b"still works")
    await arrived(got)
    assert [m.payload for m in got] == [b"still works"]


async def test_a_bad_announcement_in_a_push_costs_the_others_nothing_and_is_reported(start_nodes):
    a, b = await start_nodes(2, gossip=GossipConfig(repair_interval=0))
    got = []
    b.gossip.on_message = got.append
    good = [
        Announcement.create(a.transport.key, TOPIC, 1, i, b"ok %d" % i).encode() for i in range(2)
    ]
    outsider = Announcement.create(NodeKey.generate(), TOPIC, 1, 0, b"not a member").encode()
    with pytest.raises(RemoteError) as e:
        async with a.transport.request(
            b.address, PUSH_PROTOCOL, push_body([good[0], outsider, good[1]])
        ):
            pass
    assert e.value.status == Status.FORBIDDEN and "1 of 3 announcements refused" in str(e.value)
    assert sorted(m.payload for m in got) == [b"ok 0", b"ok 1"]


async def test_announcements_that_wait_for_a_push_to_a_peer_leave_together(start_nodes):
    a, b = await start_nodes(2, gossip=GossipConfig(repair_interval=0))
    got = []
    b.gossip.on_message = got.append
    for i in range(20):  # no await between them: all wait for the push task to run
        a.gossip._push_to_neighbours(
            Announcement.create(a.transport.key, TOPIC, 1, i, b"r%d" % i), set()
        )
    for _ in range(200):
        if len(got) == 20:
            break
        await asyncio.sleep(0.02)
    assert sorted(m.seq for m in got) == list(range(20))
    assert a.gossip.stats.pushes_sent == 20 and a.gossip.stats.push_requests == 1
    assert not a.gossip._outbox and not a.gossip._pushing and not a.gossip._in_flight


async def test_a_refused_push_does_not_hold_back_what_waits_behind_it(start_nodes):
    a, b = await start_nodes(2, gossip=GossipConfig(repair_interval=0))
    got = []
    b.gossip.on_message = got.append
    outsider = Announcement.create(NodeKey.generate(), TOPIC, 1, 0, b"x" * MAX_PAYLOAD)
    a.gossip._push_to_neighbours(outsider, set())  # refused by b: not a member
    for i in range(20):  # 4 KB each: they fill the refused push and one more
        a.gossip._push_to_neighbours(
            Announcement.create(a.transport.key, TOPIC, 1, i, b"y" * MAX_PAYLOAD), set()
        )
    for _ in range(200):
        if len(got) == 20:
            break
        await asyncio.sleep(0.02)
    assert sorted(m.seq for m in got) == list(range(20))
    assert a.gossip.stats.push_failures == 1 and a.gossip.stats.push_requests == 1  # the other one
    assert a.gossip.stats.dropped_backlog == 0


async def test_rounds_window(start_nodes):
    (a,) = await start_nodes(1, gossip=GossipConfig(repair_interval=0, retain_rounds=2))
    await a.announce(1, b"r1")
    await a.announce(1, b"r1 again")
    assert [m.seq for m in a.gossip.received(1)] == [0, 1]
    a.advance_round(4)
    assert a.gossip.received(1) == []
    with pytest.raises(ValueError, match="older"):
        await a.announce(1, b"too late")


async def test_a_member_at_a_new_address_is_no_longer_suspected(start_nodes):
    a, b = await start_nodes(2, gossip=GossipConfig(repair_interval=0))
    a.gossip._suspect(b.address.node_id, "its pushes failed")  # b died
    moved = PeerAddress(
        b.address.node_id, ("127.0.0.1:9",)
    )  # ... and came back elsewhere (same key)
    a.set_clients([a.address, b.address])
    assert b.address.node_id in a.gossip._suspects  # the same address: still suspected
    a.set_clients([a.address, moved])
    assert b.address.node_id not in a.gossip._suspects


async def test_a_node_that_suspects_every_peer_of_a_small_run_still_pushes_to_them(start_nodes):
    # startup refusals (peers that have not seen our join yet) can suspect every other member of a full
    # mesh: skipping them would leave our announcements to the others' repair pulls, seconds late
    a, b, c = await start_nodes(3, gossip=GossipConfig(repair_interval=0))
    for peer in (b, c):
        a.gossip._suspect(peer.address.node_id, "refused at startup")
    assert {p.node_id for p in a.gossip.neighbours()} == {b.address.node_id, c.address.node_id}
    got = []
    b.gossip.on_message = got.append
    await a.announce(1, b"result")
    await arrived(got)
    assert [m.payload for m in got] == [b"result"]


class ChunkedReply:
    """A reply that yields fixed chunks (stands in for a peer's digest answer)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def read(self, max_bytes: int = 1 << 20) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


async def test_repair_reply_framing():
    key = NodeKey.generate()
    wires = [Announcement.create(key, TOPIC, 1, i, b"p" * i).encode() for i in range(3)]
    stream = b"".join(struct.pack(">H", len(w)) + w for w in wires)
    split = ChunkedReply(stream[:5], stream[5:150], stream[150:])  # frames cut anywhere
    assert [w async for w in repair_frames(split)] == wires
    with pytest.raises(ValueError, match="inside a frame"):
        [w async for w in repair_frames(ChunkedReply(stream[:-1]))]
    with pytest.raises(ValueError, match="exceeds"):
        [w async for w in repair_frames(ChunkedReply(struct.pack(">H", MAX_ANNOUNCEMENT + 1)))]
