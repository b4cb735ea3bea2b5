"""Providers that hold a fetch without stalling it (a byte now and then), and callers that share one
fetch but not its terms."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from cohort.client.p2p import (
    Allowlist,
    BlobFetcher,
    BlobFetchError,
    BlobServer,
    BlobStore,
    FetchPolicy,
    NodeKey,
    blob_hash,
)
from cohort.client.p2p.blob_protocol import BLOB_PROTOCOL, LENGTH_PREFIX, MAX_REQUEST

DRIP_EVERY = 0.1


def dripping(data: bytes, every: float = DRIP_EVERY):
    """A blob handler that announces `data`'s length (asked for the whole or a part) and sends one byte
    every `every` seconds: it need not even hold the blob."""

    async def handle(peer, request, reply):
        await reply.write(LENGTH_PREFIX.pack(len(data)))
        for i in range(min(len(data), 600)):  # bounded; the fetcher leaves long before
            await reply.write(data[i : i + 1])
            await asyncio.sleep(every)

    return handle


@pytest.fixture
def providers(make_transport):
    """providers(*handlers) -> (client transport, provider addresses)."""

    async def build(*handlers):
        keys = [NodeKey.generate() for _ in range(len(handlers) + 1)]
        allow = Allowlist(k.node_id for k in keys)
        addresses = []
        for key, handler in zip(keys[1:], handlers, strict=True):
            server = await make_transport(key, allow, {BLOB_PROTOCOL: (handler, MAX_REQUEST)})
            addresses.append(server.address)
        return await make_transport(keys[0], allow), addresses

    return build


def serving(data: bytes):
    store = BlobStore()
    store.put(data, 0)
    return BlobServer([store]).handle


async def test_a_dripping_provider_is_dropped_at_the_size_scaled_deadline(providers):
    data = os.urandom(100_000)
    client, (drip,) = await providers(dripping(data))
    policy = FetchPolicy(progress_timeout=1.0, min_rate=50_000, deadline_slack=0.5)
    fetcher = BlobFetcher(client, BlobStore(), policy)
    started = time.monotonic()
    async with asyncio.timeout(15):
        with pytest.raises(BlobFetchError, match="too slow"):
            await fetcher.fetch_detailed(blob_hash(data), [drip])
    elapsed = time.monotonic() - started
    assert policy.body_deadline(len(data)) <= elapsed < policy.body_deadline(len(data)) + 3
    with pytest.raises(ValueError, match="min_rate"):
        FetchPolicy(min_rate=0)


async def test_a_callers_own_rate_sets_the_deadline(providers):
    """A check follows its run's declared rate (check_rate_kib), not the fetcher's default: a provider serving
    at 10 B/s fails a fetch held to the policy's 50 kB/s and passes one held to 8 B/s."""
    data = os.urandom(20)
    client, (drip,) = await providers(dripping(data))
    fetcher = BlobFetcher(
        client, BlobStore(), FetchPolicy(progress_timeout=1.0, min_rate=50_000, deadline_slack=0.5)
    )
    async with asyncio.timeout(15):
        with pytest.raises(BlobFetchError, match="50000 B/s minimum"):
            await fetcher.fetch(blob_hash(data), [drip])
        assert await fetcher.fetch(blob_hash(data), [drip], min_rate=8) == data
        with pytest.raises(ValueError, match="min_rate"):
            await fetcher.fetch(blob_hash(data), [drip], min_rate=0)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "in-parts"])
async def test_a_dripping_provider_is_hedged_and_the_fetch_ends_near_the_honest_time(
    providers, whole
):
    """A provider that sends the right length header and then a byte every 4 s used to count as streaming,
    never hedged: the fetch took its whole body deadline (10.7 s here). One that falls behind its share
    of that deadline is hedged now."""
    data = os.urandom(176_000)  # a small model's result
    h, size = blob_hash(data), None if whole else len(data)
    client, (drip, honest) = await providers(dripping(data, every=4.0), serving(data))
    policy = FetchPolicy()  # the client's own: hedge after 1 s
    started = time.monotonic()
    await BlobFetcher(client, BlobStore(), policy).fetch(h, [honest], expected_size=size)
    honest_time = time.monotonic() - started
    started = time.monotonic()
    result = await BlobFetcher(client, BlobStore(), policy).fetch_detailed(
        h, [drip, honest], expected_size=size
    )
    elapsed = time.monotonic() - started
    assert result.data == data and result.provider == honest.node_id
    assert result.failed == ()  # hedged, then cancelled: not a failure of its own
    assert elapsed < honest_time + 2 * policy.hedge_after, (elapsed, honest_time)


def test_the_pace_a_streaming_provider_is_held_to():
    policy = FetchPolicy(hedge_after=1.0, min_rate=100_000, deadline_slack=1.0, max_parallel=3)
    size = 1_000_000  # body deadline 11 s: each of three providers' share 11/3 s
    assert policy.on_pace(size, 0, 1.0)  # the start-up allowance
    assert not policy.on_pace(size, 10, 1.5)
    assert policy.on_pace(size, size // 2, 1.0 + 11 / 6)  # half of it in half its share
    assert not policy.on_pace(size, size // 2 - 10_000, 1.0 + 11 / 6)
    assert policy.on_pace(size, size, 100.0)


@pytest.mark.parametrize("kind", ["http"])
async def test_later_callers_keep_their_own_providers_and_size_limit(providers):
    data = os.urandom(50_000)
    h = blob_hash(data)
    client, (empty, honest) = await providers(serving(b"something else"), serving(data))
    fetcher = BlobFetcher(client, BlobStore())
    first, second = await asyncio.gather(
        fetcher.fetch(h, [empty]),  # the announcer's list was wrong ...
        fetcher.fetch(h, [honest]),  # ... this caller's is right, and joined the first fetch
        return_exceptions=True,
    )
    assert isinstance(first, BlobFetchError) and second == data

    fetcher = BlobFetcher(client, BlobStore())
    big, small = await asyncio.gather(
        fetcher.fetch(h, [honest]),
        fetcher.fetch(h, [honest], max_size=1000),  # shares the transfer, not the size limit
        return_exceptions=True,
    )
    assert big == data
    assert isinstance(small, BlobFetchError) and "more than the 1000 allowed" in str(small)
