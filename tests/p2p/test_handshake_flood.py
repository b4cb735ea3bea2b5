"""A stranger's flood of QUIC handshakes, from one process (tests/p2p/handshake_flood.py: 64 endpoints with
keys nobody allowed, 32 attempts each at a time) against a member on 127.0.0.1: the member's transport admits
strangers' handshakes a few at a time and refuses the rest statelessly, and a connection from a member's
advertised address has its own pool once a retry proved the address, so an allowed peer that dials afresh
for every fetch gets each 1 MiB fetch through in time. Measured without the cap: 3 of 5 such fetches failed
(nothing within the 5 s open timeout) while the flood lasted."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from cohort.client.p2p import Allowlist, IrohTransport, NodeKey

PAYLOAD = b"x" * (1 << 20)
FLOOD = Path(__file__).with_name("handshake_flood.py")
FLOOD_SECONDS = (
    15.0  # long enough for every fetch below even on a loaded machine (each is bounded by IN_TIME)
)
FETCHES = 5
IN_TIME = 4.0  # seconds a fetch may take under the flood (unflooded: under 0.02 s here)


async def blob(peer, body, reply):
    await reply.write(PAYLOAD)


async def fetch(a: IrohTransport, victim) -> float:
    await a.disconnect(victim.node_id)  # a fresh connection each time: a handshake amid the flood
    started = time.perf_counter()
    async with asyncio.timeout(IN_TIME):
        async with a.request(victim, "blob", b"x") as reply:
            got = 0
            while chunk := await reply.read():
                got += len(chunk)
    assert got == len(PAYLOAD)
    return time.perf_counter() - started


async def test_a_handshake_flood_from_strangers_does_not_stop_a_members_fetches(stack):
    v_key, a_key = NodeKey.generate(), NodeKey.generate()
    v_allow, a_allow = Allowlist(), Allowlist()
    victim = IrohTransport(v_key, v_allow)
    victim.add_protocol("blob", blob, max_request=16)
    await stack.enter_async_context(victim)
    member = await stack.enter_async_context(IrohTransport(a_key, a_allow))
    v_allow.replace(
        [v_key.node_id, a_key.node_id], member.address.addrs
    )  # as the chain's Endpoint accounts say
    a_allow.replace([v_key.node_id, a_key.node_id])
    flood = await asyncio.create_subprocess_exec(
        sys.executable, str(FLOOD), v_key.node_id.key.hex(), victim.address.addrs[0], str(FLOOD_SECONDS), "64", "32",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await asyncio.sleep(1.5)  # the flood is under way
        times = []
        for _ in range(
            FETCHES
        ):  # a fixed number, each under the flood: not as many as a window happens to hold
            times.append(await fetch(member, victim.address))
            assert flood.returncode is None, "the flood ended before the member's fetches did"
            await asyncio.sleep(0.1)
        counts = json.loads((await asyncio.wait_for(flood.communicate(), 30))[0])
    finally:
        if flood.returncode is None:
            flood.kill()
            await flood.wait()
    print(
        f"member fetches under the flood: {len(times)}, slowest {max(times):.3f} s; flood: {counts}; "
        f"victim: {victim.stats.extra}"
    )
    assert len(times) == FETCHES and max(times) < IN_TIME
    refused = victim.stats.extra.get("handshakes_refused", 0)
    # most never cost a handshake: refused statelessly, or left to time out (under load many are, so the
    # refused share alone is no measure: 4,358 refused and 12,533 timed out of 19,121 in one loaded run)
    assert counts["attempts"] > 5000 and refused > 0
    assert counts["handshakes"] < counts["attempts"] / 4, counts
    # the strangers that got a handshake were refused by the allowlist: only the member's fetches were served
    assert victim.stats.requests_refused > 0 and victim.stats.requests_served == FETCHES, (
        victim.stats
    )
