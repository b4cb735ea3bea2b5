"""Blobs: the store, the protocol and the fetcher, over both transports."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from support.waiting import wait_until

from cohort.client.p2p import (
    Allowlist,
    BlobFetcher,
    BlobFetchError,
    BlobServer,
    BlobStore,
    FetchPolicy,
    NodeKey,
    RemoteError,
    Status,
    blob_hash,
)
from cohort.client.p2p.blob_protocol import BLOB_PROTOCOL, MAX_REQUEST, part_request
from cohort.client.p2p.blob_store import CopyLimit
from cohort.client.p2p.uploads import Uploads


class FakeBytesSource:
    """A provider that answers for `blob` with other bytes (a faulty or malicious peer)."""

    def __init__(self, blob: bytes, data: bytes) -> None:
        self.blob, self.data = blob, data

    def blob_size(self, blob):
        return len(self.data) if blob == self.blob else None

    async def read_blob(self, blob, offset, size):
        return self.data[offset : offset + size]


class StallingSource(FakeBytesSource):
    """Sends the first chunk, then nothing (a peer whose process hangs)."""

    async def read_blob(self, blob, offset, size):
        if offset > 0:
            await asyncio.sleep(3600)
        return self.data[offset : offset + size]


class CountingSource(FakeBytesSource):
    """Honest, slow, and counts how many reads run at once and in total."""

    def __init__(self, blobs: dict[bytes, bytes]) -> None:
        self.blobs = blobs
        self.active = self.peak = self.requests = 0

    def blob_size(self, blob):
        return len(self.blobs[blob]) if blob in self.blobs else None

    async def read_blob(self, blob, offset, size):
        self.active += 1
        self.requests += offset == 0
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.05)
        self.active -= 1
        return self.blobs[blob][offset : offset + size]


@pytest.fixture
def swarm(make_transport):
    """swarm(*sources_per_provider) -> (fetcher, provider addresses); everyone allows everyone."""

    async def build(*sources, policy=None):
        keys = [NodeKey.generate() for _ in range(len(sources) + 1)]
        allow = Allowlist(k.node_id for k in keys)
        providers = []
        for key, source in zip(keys[1:], sources, strict=True):
            server = BlobServer([source])
            transport = await make_transport(
                key, allow, {BLOB_PROTOCOL: (server.handle, MAX_REQUEST)}
            )
            providers.append(transport.address)
            servers.append(server)
        client = await make_transport(keys[0], allow)
        return BlobFetcher(client, BlobStore(), policy), providers

    servers: list[BlobServer] = []
    build.servers = servers

    return build


def test_store_and_gc():
    store = BlobStore()
    a = store.put(b"round one", 1)
    b = store.put(b"round three", 3)
    assert a == blob_hash(b"round one") and store.get(a) == b"round one" and a in store
    store.put(b"round one", 2)  # stored again later: lives as long as the later round
    assert store.gc(before_round=2) == 0
    assert store.gc(before_round=3) == 1 and a not in store and b in store
    assert store.total_bytes == len(b"round three")
    with pytest.raises(ValueError, match="32 bytes"):
        store.put_verified(b"short", b"x", 1)
    with pytest.raises(ValueError, match="round"):
        store.put(b"x", -1)
    with pytest.raises(TypeError):
        store.put("text", 1)


async def test_fetch_verifies_and_keeps_for_the_round(swarm):
    data = os.urandom(3_000_000)
    store = BlobStore()
    h = store.put(data, 0)
    fetcher, (provider,) = await swarm(store)
    seen = []
    got = await fetcher.fetch(
        h, [provider], round=5, progress=lambda done, total: seen.append((done, total))
    )
    assert got == data and fetcher.store.get(h) == data
    assert seen[-1] == (len(data), len(data)) and len(seen) >= 3
    assert await fetcher.fetch(h, []) == data  # held now: no network
    assert fetcher.store.gc(before_round=6) == 1


@pytest.mark.parametrize("parts", [False, True], ids=["whole", "in-parts"])
async def test_wrong_bytes_then_next_provider(swarm, parts):
    data = os.urandom(2_000_000)
    h = blob_hash(data)
    honest = BlobStore()
    honest.put(data, 0)
    liar = FakeBytesSource(h, os.urandom(len(data)))
    fetcher, (bad, good) = await swarm(liar, honest)
    result = await fetcher.fetch_detailed(
        h, [bad, good], expected_size=len(data) if parts else None
    )
    assert result.data == data and result.provider == good.node_id
    assert [a.provider for a in result.failed] == [bad.node_id]
    assert "do not match" in result.failed[0].error


class OffsetsSource(FakeBytesSource):
    """Honest; records where each read starts (a part's first read starts at its offset)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(blob_hash(data), data)
        self.offsets: list[int] = []

    async def read_blob(self, blob, offset, size):
        self.offsets.append(offset)
        return await super().read_blob(blob, offset, size)


async def test_a_blob_of_known_size_comes_in_parts_over_separate_connections(swarm, kind):
    data = os.urandom(300_000)
    source = OffsetsSource(data)
    fetcher, (provider,) = await swarm(source)
    seen = []
    got = await fetcher.fetch(source.blob, [provider], expected_size=len(data),
                              progress=lambda done, total: seen.append((done, total)))  # fmt: skip
    assert got == data and seen[-1] == (len(data), len(data))
    assert sorted(source.offsets) == [0, 75_000, 150_000, 225_000]  # four lanes, a quarter each
    await wait_until(
        lambda: swarm.servers[0].served, 5
    )  # counted when its last write returns, maybe after the fetch
    assert swarm.servers[0].served == {source.blob: 1}  # one copy served, not four
    if kind == "iroh":  # one QUIC connection (congestion window) per lane
        assert sorted(
            lane for node, lane in fetcher.transport._outgoing if node == provider.node_id
        ) == [0, 1, 2, 3]
    small = OffsetsSource(os.urandom(1000))
    fetcher, (provider,) = await swarm(small)
    assert await fetcher.fetch(small.blob, [provider], expected_size=1000) == small.data
    assert small.offsets == [0]  # below stripe_min: whole


async def test_small_background_blobs_take_the_lanes_in_turn(swarm, kind):
    """A check's many small parts, each fetched whole, spread over the lanes' connections (each its own
    congestion window); a round's result stays on lane 0."""
    blobs = {blob_hash(d): d for d in (os.urandom(1000 + i) for i in range(8))}
    fetcher, (provider,) = await swarm(CountingSource(blobs))
    got = await asyncio.gather(
        *(
            fetcher.fetch(h, [provider], background=True, expected_size=len(d))
            for h, d in blobs.items()
        )
    )
    assert got == list(blobs.values())
    if kind == "iroh":
        assert sorted(
            lane for node, lane in fetcher.transport._outgoing if node == provider.node_id
        ) == [0, 1, 2, 3]
    result = os.urandom(500)
    fetcher, (provider,) = await swarm(CountingSource({blob_hash(result): result}))
    assert await fetcher.fetch(blob_hash(result), [provider]) == result
    if kind == "iroh":
        assert [lane for _, lane in fetcher.transport._outgoing] == [0]


async def test_a_capped_blob_counts_one_copy_per_fetch_in_parts(make_transport):
    data = os.urandom(200_000)
    h = blob_hash(data)
    store = BlobStore()
    store.put_verified(
        h, data, 0, own_copies=1, patience=60
    )  # our own result: one copy, then others serve
    keys = [NodeKey.generate() for _ in range(3)]
    allow = Allowlist(k.node_id for k in keys)
    server = BlobServer([store])
    provider = (
        await make_transport(keys[0], allow, {BLOB_PROTOCOL: (server.handle, MAX_REQUEST)})
    ).address
    first, second = [await make_transport(k, allow) for k in keys[1:]]
    assert (
        await BlobFetcher(first, BlobStore()).fetch(h, [provider], expected_size=len(data)) == data
    )
    await wait_until(lambda: server.served, 5)
    assert server.served == {h: 1}  # four parts, one copy
    with pytest.raises(
        BlobFetchError, match="served enough copies"
    ):  # the cap holds for the next fetcher
        await BlobFetcher(second, BlobStore()).fetch(h, [provider], expected_size=len(data))
    with pytest.raises(RemoteError) as e:  # ... and for a later part asked for alone
        async with second.request(provider, BLOB_PROTOCOL, part_request(h, 1, len(data))):
            pass
    assert e.value.status == Status.BUSY


def test_a_copy_limit_holds_for_its_patience_and_a_failed_copy_gives_its_place_back():
    limit = CopyLimit(first=3, published=100.0, patience=10.0)
    uploads = Uploads(linger=0.5)
    peers = [NodeKey.generate().node_id for _ in range(5)]
    blob, size = bytes(32), 1000

    def begin(peer, now, length=size):
        return uploads.begin(blob, peer, size, 0, length, limit, now, lambda b: True)

    grants = [begin(p, 100.1) for p in peers[:4]]
    assert [isinstance(g, str) for g in grants] == [False, False, False, True]
    assert isinstance(begin(peers[3], 100.2, 1), str)  # a later part asked for alone is refused too
    assert not isinstance(
        begin(peers[0], 100.2, 1), str
    )  # ... but not to a peer whose copy is under way
    uploads.end(grants[1], 10, 100.3)  # one fetcher went away: its place comes back
    taken = begin(peers[3], 100.4)
    assert not isinstance(taken, str)
    part = begin(peers[1], 100.5, 1)
    assert not isinstance(part, str)  # its next part, a moment later, passes
    uploads.end(part, 1, 100.5)
    assert isinstance(begin(peers[1], 101.0), str)  # ... but not once it stayed away
    assert uploads.end(grants[0], size, 101.0) == 1  # a copy delivered in full keeps its place
    assert uploads.end(taken, size, 101.0) == 1
    assert isinstance(begin(peers[4], 109.9), str)
    assert not isinstance(begin(peers[4], 110.0), str)  # past its patience anyone may fetch it here


async def test_a_reader_that_stops_reading_gives_its_copy_back(make_transport):
    """A fetcher that takes the one copy of our result and stops reading cannot keep it from the others:
    the server abandons a reply that is not taken at its minimum rate, and the copy's place comes back."""
    data = os.urandom(
        8 << 20
    )  # more than the stream's flow-control window: the server's writes block
    store = BlobStore()
    h = store.put(data, 0, own_copies=1, patience=60)
    server = BlobServer([store], min_rate=16 << 20, slack=1.0)
    keys = [NodeKey.generate() for _ in range(3)]
    allow = Allowlist(k.node_id for k in keys)
    provider = (
        await make_transport(keys[0], allow, {BLOB_PROTOCOL: (server.handle, MAX_REQUEST)})
    ).address
    stalls, honest = [await make_transport(k, allow) for k in keys[1:]]
    async with stalls.request(provider, BLOB_PROTOCOL, h) as reply:
        await reply.read(1000)  # ... and no more
        with pytest.raises(BlobFetchError, match="served enough copies"):
            await BlobFetcher(honest, BlobStore()).fetch(h, [provider])
        await wait_until(lambda: server.abandoned, 4)
        assert server.abandoned == 1 and server.served == {}
        assert await BlobFetcher(honest, BlobStore()).fetch(h, [provider]) == data
    await wait_until(lambda: server.served, 5)
    assert server.served == {h: 1}


async def test_missing_oversized_and_exhausted(swarm):
    data = os.urandom(100_000)
    h = blob_hash(data)
    holder = BlobStore()
    holder.put(data, 0)
    fetcher, (empty, holds) = await swarm(BlobStore(), holder)
    assert await fetcher.fetch(h, [empty, holds]) == data
    other = BlobFetcher(fetcher.transport, BlobStore())
    with pytest.raises(BlobFetchError, match="more than the 1000 allowed"):
        await other.fetch(h, [holds], max_size=1000)
    with pytest.raises(BlobFetchError) as e:
        await other.fetch(blob_hash(b"nobody has this"), [empty, holds])
    assert len(e.value.attempts) == 2 and all("NOT_FOUND" in a.error for a in e.value.attempts)
    assert e.value.not_held  # every provider said it holds no such blob
    with pytest.raises(BlobFetchError, match="more than the 1000 allowed") as e:
        await other.fetch(h, [empty, holds], max_size=1000)
    assert not e.value.not_held  # one of them did hold it
    with pytest.raises(BlobFetchError, match="no providers") as e:
        await other.fetch(blob_hash(b"nobody has this"), [])
    assert not e.value.not_held  # nobody said so
    with pytest.raises(ValueError, match="32 bytes"):
        await other.fetch(b"not a hash", [holds])
    with pytest.raises(TypeError, match="PeerAddress"):
        await other.fetch(h, ["127.0.0.1:1"])


async def test_stalled_provider_costs_the_progress_deadline(swarm):
    data = os.urandom(4_000_000)
    h = blob_hash(data)
    holder = BlobStore()
    holder.put(data, 0)
    fetcher, (stalls, holds) = await swarm(
        StallingSource(h, data), holder, policy=FetchPolicy(progress_timeout=0.5)
    )
    started = time.monotonic()
    result = await fetcher.fetch_detailed(h, [stalls, holds])
    assert result.data == data and result.provider == holds.node_id
    assert "stalled" in result.failed[0].error
    assert time.monotonic() - started < 5


async def test_a_provider_that_does_not_answer_is_hedged_not_waited_for(make_transport):
    data = os.urandom(50_000)
    h = blob_hash(data)
    keys = [NodeKey.generate() for _ in range(3)]
    allow = Allowlist(k.node_id for k in keys)

    async def silent(peer, request, reply):  # a peer whose process hangs before it answers
        await asyncio.sleep(3600)

    store = BlobStore()
    store.put(data, 0)
    mute = await make_transport(keys[1], allow, {BLOB_PROTOCOL: (silent, 32)})
    holds = await make_transport(keys[2], allow, {BLOB_PROTOCOL: (BlobServer([store]).handle, 32)})
    client = await make_transport(keys[0], allow)
    fetcher = BlobFetcher(client, BlobStore(), FetchPolicy(open_timeout=20, hedge_after=0.3))
    started = time.monotonic()
    result = await fetcher.fetch_detailed(h, [mute.address, holds.address])
    assert result.data == data and result.provider == holds.address.node_id
    assert time.monotonic() - started < 5  # the hedge, not the 20 s open timeout
    assert result.failed == ()  # the silent attempt was cancelled, not failed


async def test_a_streaming_provider_is_not_hedged(swarm):
    data = os.urandom(
        12 << 20
    )  # twelve 1 MiB reads of 0.05 s each: it streams well past the hedge time
    h = blob_hash(data)
    slow, other = CountingSource({h: data}), CountingSource({h: data})
    fetcher, providers = await swarm(slow, other, policy=FetchPolicy(hedge_after=0.3))
    assert await fetcher.fetch(h, providers) == data
    assert (slow.requests, other.requests) == (1, 0)


async def test_concurrency_is_bounded_and_fetches_are_shared(swarm):
    blobs = {blob_hash(d): d for d in (os.urandom(10_000) for _ in range(6))}
    source = CountingSource(blobs)
    fetcher, (provider,) = await swarm(source, policy=FetchPolicy(max_concurrent=2))
    hashes = list(blobs)
    results = await asyncio.gather(*(fetcher.fetch(h, [provider]) for h in hashes + hashes[:1] * 3))
    assert results[: len(hashes)] == [blobs[h] for h in hashes]
    assert source.peak <= 2
    assert source.requests == len(hashes)  # four callers of the first blob shared one transfer


class GatedSource(CountingSource):
    """Serves the blobs in `gated` only once `gate` is set (a trainer's committed states coming slowly)."""

    def __init__(self, blobs: dict[bytes, bytes], gated: set[bytes]) -> None:
        super().__init__(blobs)
        self.gated, self.gate = gated, asyncio.Event()

    async def read_blob(self, blob, offset, size):
        if blob in self.gated:
            await self.gate.wait()
        return await super().read_blob(blob, offset, size)


async def test_background_fetches_leave_slots_for_the_others(swarm):
    blobs = {blob_hash(d): d for d in (os.urandom(10_000) for _ in range(4))}
    *slow, urgent = list(blobs)
    source = GatedSource(blobs, set(slow))
    policy = FetchPolicy(max_concurrent=3, max_background=2, progress_timeout=30)
    fetcher, (provider,) = await swarm(source, policy=policy)
    background = [asyncio.create_task(fetcher.fetch(h, [provider], background=True)) for h in slow]
    await asyncio.sleep(0.3)  # two of the three hold their slots, the third waits for one
    # a round's result is fetched while every background slot is taken
    assert await asyncio.wait_for(fetcher.fetch(urgent, [provider]), 5) == blobs[urgent]
    assert not any(t.done() for t in background)
    source.gate.set()
    assert await asyncio.gather(*background) == [blobs[h] for h in slow]
    with pytest.raises(ValueError, match="max_background"):
        FetchPolicy(max_concurrent=2, max_background=3)


async def test_malformed_blob_requests(make_transport):
    key, client_key = NodeKey.generate(), NodeKey.generate()
    allow = Allowlist([key.node_id, client_key.node_id])
    store = BlobStore()
    h = store.put(b"served", 0)
    server = await make_transport(
        key, allow, {BLOB_PROTOCOL: (BlobServer([store]).handle, MAX_REQUEST)}
    )
    client = await make_transport(client_key, allow)
    for body, status in (
        (b"", Status.BAD_REQUEST),
        (h[:31], Status.BAD_REQUEST),
        (h + b"x", Status.BAD_REQUEST),
        (h + bytes(MAX_REQUEST - 31), Status.TOO_LARGE),
    ):
        with pytest.raises(RemoteError) as e:
            async with client.request(server.address, BLOB_PROTOCOL, body):
                pass
        assert e.value.status == status
    with pytest.raises(RemoteError) as e:
        async with client.request(server.address, BLOB_PROTOCOL, os.urandom(32)):
            pass
    assert e.value.status == Status.NOT_FOUND
    fetcher = BlobFetcher(client)
    assert await fetcher.fetch(h, [server.address]) == b"served"
    for offset, length, body in (
        (2, 3, b"rve"),
        (4, 100, b"ed"),
        (50, 5, b""),
    ):  # parts, clamped to the blob
        async with client.request(
            server.address, BLOB_PROTOCOL, part_request(h, offset, length)
        ) as reply:
            answer = b""
            while chunk := await reply.read():
                answer += chunk
        assert answer == (6).to_bytes(8, "big") + body
