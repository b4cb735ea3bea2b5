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
from cohort.client.p2p.blob_protocol import BLOB_PROTOCOL, LENGTH_PREFIX

DRIP_EVERY = 0.1


def dripping(data: bytes):
    """A blob handler that announces `data` and sends one byte every DRIP_EVERY seconds."""

    async def handle(peer, request, reply):
        await reply.write(LENGTH_PREFIX.pack(len(data)))
        for i in range(min(len(data), 600)):  # bounded; the fetcher leaves long before
            await reply.write(data[i : i + 1])
            await asyncio.sleep(DRIP_EVERY)

    return handle


@pytest.fixture
def providers(make_transport):
    """providers(*handlers) -> (client transport, provider addresses)."""

    async def build(*handlers):
        keys = [NodeKey.generate() for _ in range(len(handlers) + 1)]
        allow = Allowlist(k.node_id for k in keys)
        addresses = []
        for key, handler in zip(keys[1:], handlers, strict=True):
            server = await make_transport(key, allow, {BLOB_PROTOCOL: (handler, 32)})
            addresses.append(server.address)
        return await make_transport(keys[0], allow), addresses

    return build


def serving(data: bytes):
    store = BlobStore()
    store.put(data, 0)
    return BlobServer([store]).handle


async def test_a_dripping_provider_is_dropped_at_the_size_scaled_deadline(providers):
    data = os.urandom(100_000)
    client, (drip, honest) = await providers(dripping(data), serving(data))
    policy = FetchPolicy(progress_timeout=1.0, min_rate=50_000, deadline_slack=0.5)
    fetcher = BlobFetcher(client, BlobStore(), policy)
    started = time.monotonic()
    async with asyncio.timeout(15):
        result = await fetcher.fetch_detailed(blob_hash(data), [drip, honest])
    elapsed = time.monotonic() - started
    assert result.data == data and result.provider == honest.node_id
    assert "too slow" in result.failed[0].error
    assert policy.body_deadline(len(data)) <= elapsed < policy.body_deadline(len(data)) + 3
    with pytest.raises(ValueError, match="min_rate"):
        FetchPolicy(min_rate=0)


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
