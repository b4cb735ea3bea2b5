"""Gossip flood: what one hostile member of a run can make a victim hold and forward.

    .venv/bin/python benchmarks/p2p/gossip_flood.py [--rounds 200] [--per-round 64]

Three nodes on 127.0.0.1 (plain HTTP transport): the attacker, the victim and an honest neighbour of
the victim. The attacker signs `--per-round` full-size (4 KB) announcements for each of `--rounds`
future rounds and pushes every one straight to the victim, then sends one digest request claiming
to hold nothing. The victim then moves on to the next round. Printed: the announcement bytes the
victim still holds, what it pushed on to its neighbour, and how many bytes the digest request drew.
"""

from __future__ import annotations

import argparse
import asyncio
import struct

from cohort.client.p2p import (
    Announcement,
    GossipConfig,
    NodeKey,
    P2PNode,
    RemoteError,
    gossip_topic,
)
from cohort.client.p2p.announcement import MAX_PAYLOAD
from cohort.client.p2p.gossip import DIGEST_PROTOCOL, PUSH_PROTOCOL

RUN = "flood-bench"
MIB = 1 << 20


def held_bytes(node: P2PNode) -> int:
    return sum(len(a.encode()) for a in node.gossip._messages.values())


async def push(attacker: P2PNode, victim: P2PNode, wire: bytes) -> bool:
    try:
        async with attacker.transport.request(victim.address, PUSH_PROTOCOL, wire) as reply:
            while await reply.read():
                pass
    except RemoteError:
        return False
    return True


async def digest_draw(attacker: P2PNode, victim: P2PNode) -> int:
    """Bytes one digest request ("I hold nothing, from round 0 on") pulls out of the victim."""
    drawn = 0
    async with attacker.transport.request(
        victim.address, DIGEST_PROTOCOL, struct.pack(">Q", 0)
    ) as reply:
        while chunk := await reply.read():
            drawn += len(chunk)
    return drawn


async def main(rounds: int, per_round: int) -> None:
    config = GossipConfig(repair_interval=0)
    nodes = [P2PNode.http(NodeKey.generate(), RUN, gossip=config) for _ in range(3)]
    attacker, victim, neighbour = nodes
    for node in nodes:
        await node.start()
    try:
        for node in nodes:
            node.set_clients([n.address for n in nodes])
        topic = gossip_topic(RUN)
        payload = b"x" * MAX_PAYLOAD
        key = attacker.transport.key
        wires = [
            Announcement.create(key, topic, 1 + r, seq, payload).encode()
            for r in range(rounds)
            for seq in range(per_round)
        ]
        sent = len(wires)
        accepted = 0
        for start in range(0, sent, 64):
            results = await asyncio.gather(
                *(push(attacker, victim, w) for w in wires[start : start + 64])
            )
            accepted += sum(results)  # answered OK (dropped or held)
        await asyncio.sleep(1.0)  # let the victim's forwarding finish
        drawn = await digest_draw(attacker, victim)
        victim.advance_round(1)
        print(f"attacker pushed {sent} announcements ({sent * len(wires[0]) / MIB:.1f} MiB)")
        print(f"victim answered OK: {accepted}, delivered: {victim.gossip.stats.delivered}")
        print(f"victim holds after moving to round 1: {held_bytes(victim) / MIB:.2f} MiB")
        print(
            f"victim forwarded to its neighbour: {victim.gossip.stats.push_bytes_sent / MIB:.2f} MiB"
        )
        print(f"neighbour holds: {held_bytes(neighbour) / MIB:.2f} MiB")
        print(f"one empty digest request drew: {drawn / MIB:.2f} MiB")
    finally:
        for node in nodes:
            await node.gossip.close()
        for node in nodes:
            await node.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--per-round", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.per_round))
