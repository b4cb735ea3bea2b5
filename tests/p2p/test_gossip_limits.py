"""A member of the run floods the gossip: what it can make a victim hold, forward and send is bounded."""

from __future__ import annotations

import struct

import pytest

from cohort.client.p2p import Announcement, GossipConfig, P2PNode, RemoteError, Status, gossip_topic
from cohort.client.p2p.announcement import MAX_ANNOUNCEMENT, MAX_PAYLOAD
from cohort.client.p2p.gossip import DIGEST_PROTOCOL, PUSH_PROTOCOL, push_body

TOPIC = gossip_topic("test-run")
FULL = b"x" * MAX_PAYLOAD  # a 4 KB announcement


def held_from(node: P2PNode, origin: P2PNode) -> int:
    """Announcement bytes `node` holds whose origin is `origin`."""
    return sum(
        a.size for a in node.gossip._messages.values() if a.origin == origin.transport.node_id
    )


async def push(sender: P2PNode, target: P2PNode, announcement: Announcement) -> Status:
    try:
        async with sender.transport.request(
            target.address, PUSH_PROTOCOL, push_body([announcement.encode()])
        ) as reply:
            await reply.read()
    except RemoteError as e:
        return e.status
    return Status.OK


@pytest.mark.parametrize("kind", ["http"])
async def test_future_rounds_and_per_origin_quota(start_nodes):
    config = GossipConfig(repair_interval=0)
    attacker, victim, neighbour = await start_nodes(3, gossip=config)
    key = attacker.transport.key

    for round in range(1, 41):  # far ahead of the victim's round 0: dropped, not held or forwarded
        status = await push(attacker, victim, Announcement.create(key, TOPIC, round, 0, FULL))
        assert status == Status.OK
    assert {a.round for a in victim.gossip._messages.values()} == {1, 2}
    assert victim.gossip.stats.future == 38

    statuses = [  # inside the window: the origin's bytes and message count are capped
        await push(attacker, victim, Announcement.create(key, TOPIC, round, seq, FULL))
        for round in (0, 1, 2)
        for seq in range(1, 64)
    ]
    assert Status.TOO_LARGE in statuses
    assert held_from(victim, attacker) <= config.max_bytes_per_origin
    assert victim.gossip.stats.over_quota == statuses.count(Status.TOO_LARGE)
    framing = 2 * victim.gossip.stats.pushes_sent  # each announcement's u16 length in its push
    assert victim.gossip.stats.push_bytes_sent <= config.max_bytes_per_origin + framing
    assert held_from(neighbour, attacker) <= config.max_bytes_per_origin  # forwarded no more

    victim.advance_round(10)  # moving on frees all of it
    assert held_from(victim, attacker) == 0 and not victim.gossip._origin_use
    with pytest.raises(ValueError, match="ahead"):
        await victim.announce(13, b"too early")


@pytest.mark.parametrize("kind", ["http"])
async def test_own_announcements_respect_the_same_quota(start_nodes):
    (node,) = await start_nodes(1, gossip=GossipConfig(repair_interval=0, max_per_origin_round=3))
    for _ in range(3):
        await node.announce(1, b"ok")
    with pytest.raises(ValueError, match="3 announcements in round 1"):
        await node.announce(1, b"one too many")


@pytest.mark.parametrize("kind", ["http"])
async def test_a_digest_request_draws_at_most_one_bounded_reply(start_nodes):
    config = GossipConfig(repair_interval=0, max_repair_bytes=16 * MAX_ANNOUNCEMENT)
    holder, asker = await start_nodes(2, gossip=config)
    holder.gossip.set_members([holder.address])  # pushes to nobody: the asker learns by repair
    for _ in range(40):
        await holder.announce(1, FULL)

    async def draw() -> int:
        drawn = 0
        async with asker.transport.request(
            holder.address, DIGEST_PROTOCOL, struct.pack(">Q", 0)
        ) as reply:
            while chunk := await reply.read():
                drawn += len(chunk)
        return drawn

    drawn = await draw()
    assert 15 * MAX_ANNOUNCEMENT < drawn <= 16 * (MAX_ANNOUNCEMENT + 2)
    assert await asker.gossip.repair_now() == 16  # the repair pull reads one reply's worth ...
    assert await asker.gossip.repair_now() == 16  # ... and the next repair the next part
    assert await asker.gossip.repair_now() == 8


@pytest.mark.parametrize("kind", ["http"])
async def test_an_origins_first_two_different_statements_of_a_round_pass_its_spent_quota(
    start_nodes,
):
    """Fillers spend the origin's quota; a statement it already made (re-sent under a new seq) does not pass
    again, nor a third: at most two announcements beyond the quota, and only ones that differ."""
    config = GossipConfig(repair_interval=0, max_per_origin_round=4)
    attacker, victim = await start_nodes(2, gossip=config)
    victim.gossip.statement = lambda a: a.payload if a.payload.startswith(b"S") else None
    key = attacker.transport.key
    sent = [b"S1", b"f1", b"f2", b"f3", b"f4", b"S1", b"S2", b"f5", b"S3"]
    statuses = [
        await push(attacker, victim, Announcement.create(key, TOPIC, 1, seq, body))
        for seq, body in enumerate(sent)
    ]
    assert (
        statuses == [Status.OK] * 4 + [Status.TOO_LARGE] * 2 + [Status.OK] + [Status.TOO_LARGE] * 2
    )
    assert sorted(a.payload for a in victim.gossip.received(1)) == [
        b"S1",
        b"S2",
        b"f1",
        b"f2",
        b"f3",
    ]
    victim.advance_round(10)
    assert not victim.gossip._statements


def test_limits_are_validated():
    with pytest.raises(ValueError, match="future_rounds"):
        GossipConfig(future_rounds=-1)
    with pytest.raises(ValueError, match="byte limits"):
        GossipConfig(max_bytes_per_origin=100)
    with pytest.raises(ValueError, match=">= 1"):
        GossipConfig(max_digests_per_peer=0)
