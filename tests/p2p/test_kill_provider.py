"""A provider process killed (SIGKILL) mid-transfer: the fetch moves to another holder within the
progress deadline instead of waiting out QUIC's 30 s idle timeout; restarted with the same key at a new
address, it is asked at once, not through the dead connection."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from cohort.client.p2p import (
    Allowlist,
    BlobFetcher,
    BlobServer,
    BlobStore,
    FetchPolicy,
    NodeKey,
    blob_hash,
)
from cohort.client.p2p.__main__ import seeded_bytes
from cohort.client.p2p.blob_protocol import BLOB_PROTOCOL

BLOB_MB, SEED = 64, 11
PROGRESS_DEADLINE = 1.5


async def test_provider_killed_mid_transfer(kind, make_transport, spawn_peer):
    data = seeded_bytes(BLOB_MB << 20, SEED)
    h = blob_hash(data)
    client_key, holder_key = NodeKey.generate(), NodeKey.generate()
    doomed = spawn_peer(kind, [client_key.node_id], "--random-blob", f"{BLOB_MB}:{SEED}")
    assert doomed.blobs == [h]

    allow = Allowlist([client_key.node_id, holder_key.node_id, doomed.address.node_id])
    store = BlobStore()
    store.put(data, 0)
    holder = await make_transport(
        holder_key, allow, {BLOB_PROTOCOL: (BlobServer([store]).handle, 32)}
    )
    client = await make_transport(client_key, allow)
    fetcher = BlobFetcher(client, BlobStore(), FetchPolicy(progress_timeout=PROGRESS_DEADLINE))

    killed_at = []

    def kill_once_data_flows(done: int, total: int) -> None:
        if not killed_at and done >= 1 << 20:
            doomed.proc.send_signal(signal.SIGKILL)
            killed_at.append(time.monotonic())

    result = await fetcher.fetch_detailed(
        h, [doomed.address, holder.address], progress=kill_once_data_flows
    )
    recovered = time.monotonic() - killed_at[0]

    assert result.data == data and result.provider == holder.node_id
    assert [a.provider for a in result.failed] == [doomed.address.node_id]
    if kind == "iroh":  # QUIC does not notice a dead peer: only our deadline saves the 30 s
        assert "stalled" in result.failed[0].error
    assert doomed.proc.wait(timeout=10) == -signal.SIGKILL
    assert recovered < 2 * PROGRESS_DEADLINE + 5, f"took {recovered:.1f} s after the kill"


@pytest.mark.parametrize("dials_us", [False, True], ids=["quiet", "dialled-us"])
async def test_a_restarted_peer_at_a_new_address_is_reached_at_once(kind, make_transport, spawn_peer, tmp_path,
                                                                     dials_us: bool):  # fmt: skip
    # the same key, a new port (a client restarted): the old connection is not waited on. "dialled-us": its
    # old instance's connections to us are still open (QUIC waits 30 s to call them dead) when the new one
    # starts and dials us too, as a member's pushes do; our dial to the new address must still get through
    key_file = tmp_path / "peer.key"
    peer_key = NodeKey.generate()
    peer_key.save(key_file)
    client_key = NodeKey.generate()
    client = await make_transport(
        client_key,
        Allowlist([peer_key.node_id]),
        {BLOB_PROTOCOL: (BlobServer([BlobStore()]).handle, 64)},
    )
    dial = ("--dial", f"{client_key.node_id.hex()}@{client.address.addrs[0]}") if dials_us else ()
    fetcher = BlobFetcher(client, BlobStore())
    for life in range(2):
        peer = spawn_peer(
            kind,
            [client_key.node_id],
            "--random-blob",
            f"1:{life}",
            "--key-file",
            str(key_file),
            *dial,
        )
        for _ in range(500 if dials_us else 0):  # its dial reached us (bounded: 5 s)
            if client.stats.requests_served > life:
                break
            await asyncio.sleep(0.01)
        assert client.stats.requests_served == (life + 1 if dials_us else 0)
        started = time.monotonic()
        result = await fetcher.fetch_detailed(peer.blobs[0], [peer.address])
        assert result.provider == peer_key.node_id and not result.failed, result.failed
        assert time.monotonic() - started < 2.0, f"life {life}: {time.monotonic() - started:.1f} s"
        peer.proc.send_signal(signal.SIGKILL)
        peer.proc.wait(10)
