"""The client's exchange with adversarial peers (real P2P nodes over HTTP on 127.0.0.1): forged or
unsigned result statements, strangers, dropped members still sending, payloads that are invalid, of the
wrong size or for another step. Nothing bad is kept in the blob store (so it is never served onward)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import struct
from contextlib import AsyncExitStack
from types import SimpleNamespace

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from cohort.client.p2p import (
    Allowlist,
    Announcement,
    HttpTransport,
    NodeKey,
    P2PNode,
    RemoteError,
    gossip_topic,
)
from cohort.client.p2p.gossip import PUSH_PROTOCOL, push_body
from cohort.client.runtime import exchange as exchange_module
from cohort.client.runtime.exchange import Exchange
from cohort.client.runtime.machine import PeerReady, PeerResult, ResultFailed, ResultHeld
from cohort.client.runtime.messages import Ready, Result, decode_message
from cohort.client.runtime.replica import PayloadHeader
from cohort.sdk.coordinator_core import load_idl
from cohort.sdk.statements import result_statement

SIZE = 64
EPOCH = 2  # the epoch result statements name (Run.epoch_number)


def payload(step: int, batch: tuple[int, int], size: int = SIZE) -> bytes:
    head = b"OK" + struct.pack("<IQQ", step, *batch)
    return head + bytes(size - len(head))


def check(data: bytes) -> PayloadHeader:
    if not data.startswith(b"OK"):
        raise ValueError("not a result of this model")
    step, start, end = struct.unpack_from("<IQQ", data, 2)
    return PayloadHeader(step, (start, end))


class Peers:
    def __init__(self, stack: AsyncExitStack) -> None:
        self.stack, self.idl, self.run = stack, load_idl(), Keypair().pubkey()
        self.events: list = []

    async def start(self, n: int) -> None:
        self.keys = [NodeKey.generate() for _ in range(n)]
        self.nodes = [P2PNode(HttpTransport(k, Allowlist()), bytes(self.run)) for k in self.keys]
        for node in self.nodes:
            await self.stack.enter_async_context(node)
        addresses = [node.address for node in self.nodes]
        for node in self.nodes:
            node.set_clients(addresses)
        self.posted: list = []
        recorder = SimpleNamespace(
            emit=lambda name, **f: self.events.append((name, f)), status=lambda **_: None
        )
        self.exchange = Exchange(self.nodes[0], self.keys[0], self.idl, self.run, recorder,  # type: ignore[arg-type]
                                 self.posted.append, check, lambda: SIZE)  # fmt: skip
        members = [
            SimpleNamespace(index=i, p2p_identity=Pubkey(bytes(k.node_id.key)))
            for i, k in enumerate(self.keys)
        ]
        run = SimpleNamespace(
            clients=members,
            progress=SimpleNamespace(step=0),
            config=SimpleNamespace(max_round_train_time=8),
            epoch_number=EPOCH,
        )
        self.exchange.set_view(SimpleNamespace(run=run, newest=None))  # type: ignore[arg-type]
        self.exchange.set_peers({i: a for i, a in enumerate(addresses) if i}, tuple(range(n)), None)

    def announce(self, sender: int, body: bytes, round: int, key: NodeKey | None = None) -> None:
        announcement = Announcement.create(
            key or self.keys[sender], gossip_topic(bytes(self.run)), round, 0, body
        )
        self.exchange.on_message(announcement)

    def signed(
        self, sender: int, step: int, batch: tuple[int, int], data: bytes, by: NodeKey | None = None
    ) -> bytes:
        commitment = hashlib.sha256(data).digest()
        signature = (by or self.keys[sender]).sign(
            result_statement(self.idl, self.run, EPOCH, step, batch, commitment)
        )
        return Result(step, *batch, commitment, len(data), signature).encode()

    async def outcome(self, timeout: float = 10.0):
        until = asyncio.get_running_loop().time() + timeout
        while not self.posted:
            assert asyncio.get_running_loop().time() < until, "no outcome"
            await asyncio.sleep(0.02)
        return self.posted.pop(0)


@pytest.fixture
async def peers():
    async with AsyncExitStack() as stack:
        yield Peers(stack)


async def test_only_members_signed_statements_reach_the_machine(peers):
    await peers.start(3)
    data = payload(5, (0, 8))
    peers.announce(1, peers.signed(1, 5, (0, 8), data), 5)
    posted = await peers.outcome()
    assert isinstance(posted, PeerResult) and posted.sender == 1 and posted.result.step == 5
    peers.announce(
        1, peers.signed(1, 5, (0, 8), data, by=peers.keys[2]), 5
    )  # another member's signature
    peers.announce(1, peers.signed(1, 6, (0, 8), data), 5)  # a step other than its gossip round
    stranger = NodeKey.generate()
    peers.announce(
        1, peers.signed(1, 5, (0, 8), data, by=stranger), 5, key=stranger
    )  # not a member at all
    peers.announce(2, Ready(0).encode(), 5)
    assert await peers.outcome() == PeerReady(2, 0)
    assert not peers.posted
    assert [f["error"] for name, f in peers.events if name == "bad_message"] == [
        "result statement not signed by its trainer",
        "step differs from its gossip round",
    ]


async def test_a_dropped_member_is_no_longer_heard(peers):
    await peers.start(3)
    addresses = {i: n.address for i, n in enumerate(peers.nodes) if i}
    peers.exchange.set_peers(addresses, (0, 1), None)  # member 2 was dropped
    peers.announce(2, Ready(0).encode(), 1)
    peers.announce(1, Ready(0).encode(), 1)
    assert await peers.outcome() == PeerReady(1, 0)
    assert not peers.posted


@pytest.mark.parametrize("bad, bad_payload, why", [
    (True, b"XX" + bytes(SIZE - 2), "not a result of this model"),
    (True, payload(6, (0, 8)), "disagrees"),  # a valid result of another step
    (True, payload(5, (8, 16)), "disagrees"),  # of a batch the chain did not give it
    (False, payload(5, (0, 8), size=SIZE * 4), "more than"),  # larger than this model's results
    (True, payload(5, (0, 8))[: SIZE - 1] + b"", "bytes; this model's are"),  # smaller
])  # fmt: skip
async def test_bad_payloads_are_refused_and_never_kept(peers, bad, bad_payload, why):
    await peers.start(2)
    commitment = peers.nodes[1].store.put(bad_payload, 5)
    peers.exchange.fetch(5, 1, commitment, (0, 8))
    failed = await peers.outcome()
    assert isinstance(failed, ResultFailed) and failed.bad == bad and why in failed.reason, failed
    assert commitment not in peers.nodes[0].store


async def test_a_good_payload_is_kept_and_served_onward(peers):
    await peers.start(3)
    data = payload(5, (0, 8))
    commitment = peers.nodes[1].store.put(data, 5)
    peers.exchange.fetch(5, 1, commitment, (0, 8))
    assert await peers.outcome() == ResultHeld(5, 1, commitment)
    assert peers.nodes[0].store.get(commitment) == data
    fetched = await peers.nodes[2].fetcher.fetch(
        commitment, [peers.nodes[0].address], max_size=SIZE
    )
    assert fetched == data  # node 0 serves what it checked


async def test_a_provider_that_never_answers_costs_a_bounded_time(peers, monkeypatch):
    monkeypatch.setattr(exchange_module, "FETCH_DEADLINE", 1.0)
    await peers.start(2)
    missing = hashlib.sha256(b"nobody has this").digest()
    started = asyncio.get_running_loop().time()
    peers.exchange.fetch(5, 1, missing, (0, 8))
    failed = await peers.outcome()
    assert isinstance(failed, ResultFailed) and not failed.bad
    assert asyncio.get_running_loop().time() - started < 5


async def test_bytes_we_hold_are_refused_for_a_trainer_whose_batch_they_do_not_name(peers):
    """A byte-for-byte copy: trainer 2 announces trainer 1's commitment under its own batch. We hold the
    bytes already (fetched for trainer 1), so nothing is downloaded; still the payload names trainer 1's
    batch, and the copy is refused for trainer 2 alone, whether the batch is remembered or read again."""
    await peers.start(3)
    data = payload(5, (0, 8))
    commitment = peers.nodes[1].store.put(data, 5)
    peers.exchange.fetch(5, 1, commitment, (0, 8))
    assert await peers.outcome() == ResultHeld(5, 1, commitment)
    for forget in (False, True):
        if forget:
            peers.exchange.headers.clear()
        peers.exchange.fetch(5, 2, commitment, (8, 16))
        failed = await peers.outcome()
        assert (
            isinstance(failed, ResultFailed)
            and failed.bad
            and failed.sender == 2
            and "a copy" in failed.reason
        )
        peers.exchange.fetch(5, 1, commitment, (0, 8))  # the original is still its trainer's
        assert await peers.outcome() == ResultHeld(5, 1, commitment)
    assert peers.nodes[0].store.get(commitment) == data


async def test_our_own_result_copied_by_another_trainer_is_refused_for_it(peers):
    await peers.start(2)
    peers.nodes[0].gossip.advance_round(5)
    data = payload(5, (0, 8))
    commitment = hashlib.sha256(data).digest()
    await peers.exchange.publish(5, (0, 8), commitment, data)
    peers.exchange.fetch(5, 1, commitment, (8, 16))
    failed = await peers.outcome()
    assert isinstance(failed, ResultFailed) and failed.bad and "a copy" in failed.reason


async def test_an_equivocators_two_statements_reach_every_peer_whatever_fillers_it_sent(peers):
    """The origin (node 3) pushes its result A plus fillers enough to spend its gossip quota to node 0, and
    another result B for the same step plus as many fillers to node 1: each statement still passes every
    quota, by push and by repair, so every honest peer holds both (the proof it reports)."""
    await peers.start(4)
    posted: dict[int, list] = {0: peers.posted}
    peers.nodes[0].gossip.on_message = peers.exchange.on_message
    for i in (1, 2):
        posted[i] = []
        peers.nodes[i].gossip.on_message = (exchange := Exchange(peers.nodes[i], peers.keys[i], peers.idl, peers.run, SimpleNamespace(emit=lambda *a, **f: None),
                            posted[i].append, check, lambda: SIZE)).on_message  # type: ignore[arg-type]  # fmt: skip
        exchange.set_view(peers.exchange.view)  # type: ignore[arg-type]
        exchange.set_peers(
            {j: n.address for j, n in enumerate(peers.nodes) if j != i}, tuple(range(4)), None
        )
    attacker, topic = peers.keys[3], gossip_topic(bytes(peers.run))
    quota = peers.nodes[0].gossip.config.max_per_origin_round
    twins = [peers.signed(3, 1, (0, 8), payload(1, (0, 8))[:-1] + bytes([k])) for k in (0, 1)]
    for k, (victim, twin) in enumerate(zip(peers.nodes[:2], twins, strict=True)):
        bodies = [twin] + [b"filler %d" % n for n in range(quota - 1)]
        frames = [
            Announcement.create(attacker, topic, 1, 1000 * k + seq, body).encode()
            for seq, body in enumerate(bodies)
        ]
        with contextlib.suppress(RemoteError):  # what was over the quota is refused (the rest kept)
            async with peers.nodes[3].transport.request(
                victim.address, PUSH_PROTOCOL, push_body(frames)
            ) as reply:
                await reply.read()
    for _ in range(2):
        for node in peers.nodes[:3]:
            await node.gossip.repair_now()
    for i in range(3):
        stated = {
            m.result.commitment for m in posted[i] if isinstance(m, PeerResult) and m.sender == 3
        }
        assert stated == {decode_message(t).commitment for t in twins}, (
            f"node {i} holds {len(stated)} of the two"
        )
