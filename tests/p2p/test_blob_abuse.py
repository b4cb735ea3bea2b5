"""Members that abuse a blob server (real transports on 127.0.0.1): one that takes a trainer's first copies
with 1-byte requests, one that holds requests open without reading, one that re-downloads a blob part by
part. Each is held to what it may have of a blob; honest fetchers are not made to wait."""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import AsyncExitStack

import pytest
from support.waiting import wait_until

from cohort.client.p2p import (
    Allowlist,
    BlobFetcher,
    BlobFetchError,
    BlobServer,
    BlobStore,
    NodeKey,
    RemoteError,
    Status,
    Transport,
)
from cohort.client.p2p.blob_protocol import BLOB_PROTOCOL, LENGTH_PREFIX, MAX_REQUEST, part_request
from cohort.client.p2p.blob_store import CopyLimit
from cohort.client.p2p.transport import MAX_LANES, PeerAddress
from cohort.client.p2p.uploads import COPIES_PER_PEER, Uploads

OWN = 3  # the trainer's first copies (runtime OWN_COPIES)
RESULT = 200_000  # about a small model's result: fetched in four parts


async def serve(make_transport, data: bytes, peers: int, *, own: int | None = OWN, patience: float = 60.0,
                **server) -> tuple[bytes, BlobServer, PeerAddress, list[Transport]]:  # fmt: skip
    """A provider holding `data` (as its own result, limited to `own` copies, unless None) and `peers`
    transports that may ask it."""
    store = BlobStore()
    h = store.put(data, 0, own_copies=own, patience=patience)
    keys = [NodeKey.generate() for _ in range(peers + 1)]
    allow = Allowlist(k.node_id for k in keys)
    blob_server = BlobServer([store], **server)
    provider = await make_transport(
        keys[0], allow, {BLOB_PROTOCOL: (blob_server.handle, MAX_REQUEST)}
    )
    return h, blob_server, provider.address, [await make_transport(k, allow) for k in keys[1:]]


async def ask(transport: Transport, provider: PeerAddress, request: bytes) -> bytes:
    """One request, its whole reply read."""
    out = b""
    async with transport.request(provider, BLOB_PROTOCOL, request) as reply:
        while chunk := await reply.read():
            out += chunk
    return out


async def refusal(transport: Transport, provider: PeerAddress, request: bytes) -> Status | None:
    try:
        await ask(transport, provider, request)
    except RemoteError as e:
        return e.status
    return None


async def test_one_byte_requests_do_not_take_the_trainers_copies(make_transport):
    """Copy-limit squat: 1-byte requests at offset 0 used to count as the trainer's first copies, and every
    honest fetcher was refused for the limit's whole patience (10.3 s to fetch, retrying). Now a copy counts
    once it was sent in full, and a request holds a place only while it is answered."""
    data = os.urandom(RESULT)
    h, server, provider, (squatter, *honest) = await serve(make_transport, data, OWN + 2)
    for _ in range(OWN + 2):
        assert len(await ask(squatter, provider, part_request(h, 0, 1))) == LENGTH_PREFIX.size + 1
    started = time.monotonic()
    fetched = await asyncio.gather(*(BlobFetcher(t, BlobStore()).fetch(h, [provider], expected_size=len(data))
                                     for t in honest[:OWN]))  # fmt: skip
    assert fetched == [data] * OWN and time.monotonic() - started < 1.0
    await wait_until(
        lambda: server.served.get(h) == OWN, 5
    )  # counted: the copies sent in full, no others
    with pytest.raises(BlobFetchError, match="served enough copies"):  # those still hold the limit
        await BlobFetcher(honest[OWN], BlobStore()).fetch(h, [provider], expected_size=len(data))


async def test_a_peer_holds_one_place_however_many_requests_it_leaves_unread(
    make_transport, stack: AsyncExitStack
):
    """A member that opens requests for the trainer's result and stops reading holds one of its places,
    not one per request; it may not have more than a lane's worth of requests at once, nor ask for more
    than its copies' worth of bytes."""
    data = os.urandom(
        8 << 20
    )  # more than a stream's flow-control window: the server's writes block
    h, _, provider, (squatter, a, b, c) = await serve(make_transport, data, 4)
    for lane in range(COPIES_PER_PEER):  # whole copies, each left unread after its first bytes
        reply = await stack.enter_async_context(
            squatter.request(provider, BLOB_PROTOCOL, h, lane=lane)
        )
        await reply.read(1000)
    assert (
        await refusal(squatter, provider, part_request(h, 0, 1)) == Status.BUSY
    )  # its copies' worth asked
    results = await asyncio.gather(
        *(BlobFetcher(t, BlobStore()).fetch(h, [provider]) for t in (a, b))
    )
    assert results == [data, data]  # the squatter, a and b: three places
    with pytest.raises(BlobFetchError, match="served enough copies"):
        await BlobFetcher(c, BlobStore()).fetch(h, [provider])


async def test_requests_at_once_per_peer_are_capped(make_transport, stack: AsyncExitStack):
    data = os.urandom(32 << 20)  # parts larger than a stream's flow-control window
    h, _, provider, (greedy, honest) = await serve(make_transport, data, 2, own=None)
    step = len(data) // MAX_LANES
    for lane in range(
        MAX_LANES
    ):  # one part per lane, unread: as many as an honest striped fetch asks
        reply = await stack.enter_async_context(
            greedy.request(provider, BLOB_PROTOCOL, part_request(h, lane * step, step), lane=lane))  # fmt: skip
        await reply.read(1000)
    assert await refusal(greedy, provider, part_request(h, 0, 1)) == Status.BUSY
    assert (
        await BlobFetcher(honest, BlobStore()).fetch(h, [provider], expected_size=len(data)) == data
    )


@pytest.mark.parametrize("part", [(1, RESULT), (RESULT // 2, 1)], ids=["past-offset-0", "one-byte"])
async def test_a_part_by_part_re_downloader_is_capped(make_transport, part):
    """Uncounted parts: requests at offset >= 1 were never counted, so one member could have a result or a
    state uploaded to it without end. Every request is charged now: what it asks, and at least a lane's
    share of the blob."""
    data = os.urandom(
        RESULT
    )  # a copy's worth drains in a minute here, not a second: none during the test
    h, server, provider, (greedy, honest) = await serve(make_transport, data, 2, own=None,
                                                        uploads=Uploads(refetch_every=60.0))  # fmt: skip
    answers = [await refusal(greedy, provider, part_request(h, *part)) for _ in range(20)]
    granted = answers.count(None)
    assert set(answers[granted:]) == {Status.BUSY}  # refused from then on
    assert granted <= COPIES_PER_PEER * MAX_LANES
    assert server.bytes_served <= COPIES_PER_PEER * len(data)
    assert (
        await BlobFetcher(honest, BlobStore()).fetch(h, [provider], expected_size=len(data)) == data
    )


def test_a_copy_counts_once_every_byte_was_sent():
    uploads, size = Uploads(), 1000
    blob, peer = os.urandom(32), NodeKey.generate().node_id

    def sent(start: int, length: int) -> int:
        grant = uploads.begin(blob, peer, size, start, length, None, 0.0, lambda b: True)
        assert not isinstance(grant, str)
        return uploads.end(grant, length, 0.0)

    assert [sent(1, 999), sent(0, 1)] == [0, 1]  # byte 0 came last: a copy only then
    assert [sent(0, 600), sent(400, 600)] == [0, 1]  # parts that overlap
    assert sent(0, 1) == 0


def test_a_blob_may_be_asked_again_once_a_copys_worth_drained():
    """Equal state parts recur across steps, and a verifier that checks a trainer again fetches them again:
    past its burst, a peer may have one more copy each `refetch_every` seconds (never at the line's rate)."""
    uploads, size = Uploads(refetch_every=1.0), 1000
    blob, peer = os.urandom(32), NodeKey.generate().node_id

    def fetch(now: float) -> bool:
        grant = uploads.begin(blob, peer, size, 0, size, None, now, lambda b: True)
        if isinstance(grant, str):
            return False
        uploads.end(grant, size, now)
        return True

    assert [fetch(10.0) for _ in range(COPIES_PER_PEER + 1)] == [True] * COPIES_PER_PEER + [False]
    assert not fetch(10.5) and fetch(11.0) and not fetch(11.0)
    assert fetch(12.0) and fetch(13.0)  # one a second goes on for ever


def test_accounts_are_per_peer_and_blob_and_a_granted_copy_is_never_cut_off():
    """The copy set used to be cleared at 4,096 entries, and the later parts of a copy granted before were
    refused: accounts now belong to a blob and a peer, and are swept only when their blob is gone."""
    uploads = Uploads()
    limit = CopyLimit(first=1, published=0.0, patience=60.0)
    ours, size = os.urandom(32), 4000
    trainer_fetcher, stranger = NodeKey.generate().node_id, NodeKey.generate().node_id
    first = uploads.begin(ours, trainer_fetcher, size, 0, 1000, limit, 1.0, lambda b: True)
    assert not isinstance(first, str)
    others = [
        os.urandom(32) for _ in range(5000)
    ]  # another peer fetches many other blobs, then they go
    held = set(others[-10:]) | {ours}
    for blob in others:
        grant = uploads.begin(blob, stranger, 100, 0, 100, None, 2.0, held.__contains__)
        assert not isinstance(grant, str)
        uploads.end(grant, 100, 2.0)
    assert len(uploads) < 2100  # swept as it grew: the blobs no longer held
    assert not isinstance(
        uploads.begin(ours, trainer_fetcher, size, 1000, 3000, limit, 3.0, held.__contains__), str
    )
    assert isinstance(
        uploads.begin(ours, stranger, size, 0, 1000, limit, 3.0, held.__contains__), str
    )
