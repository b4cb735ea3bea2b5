"""A real iroh (QUIC) connection through the bed: a blob server in one namespace, a P2PNode in
another, both bound to their namespace addresses; the fetch pays the emulated RTT and rate."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from support.wan import Link, WanBed, WanUnavailable
from support.wan.process import NodeProcess

from cohort.client.p2p import NodeKey

FETCH = str(Path(__file__).with_name("iroh_fetch.py"))
MB, SEED = 1, 7
RATE_MBIT = 20

pytestmark = pytest.mark.timeout(60)


async def test_iroh_blob_fetch_pays_rtt_and_rate(tmp_path):
    rtt = 2 * (15 + 10) / 1000
    client_key = NodeKey.generate()
    client_key.save(tmp_path / "client.key")
    links = {
        "server": Link(delay_ms=15, rate_mbit=RATE_MBIT),
        "client": Link(delay_ms=10, rate_mbit=RATE_MBIT),
    }
    bed = WanBed(links)
    try:
        await bed.__aenter__()
    except WanUnavailable as e:
        pytest.skip(str(e))
    try:
        host, client_host = bed.address("server"), bed.address("client")
        serve = [sys.executable, *"-m cohort.client.p2p serve --transport iroh --stdin-lifeline".split(),
                 "--host", host, "--random-blob", f"{MB}:{SEED}", "--allow", client_key.node_id.hex()]  # fmt: skip
        server = NodeProcess(bed, "server", serve, stdin=subprocess.PIPE)
        info = await asyncio.to_thread(server.json_line, 30)
        assert [a.rsplit(":", 1)[0] for a in info["addrs"]] == [host]  # not 127.0.0.1
        before = bed.stats().links["server"]["up"].bytes
        fetch = [sys.executable, FETCH, "--host", client_host, "--key-file", str(tmp_path / "client.key"),
                 "--peer", info["node_id"], "--addr", info["addrs"][0], "--blob", info["blobs"][0]]  # fmt: skip
        client = NodeProcess(bed, "client", fetch)
        result = await asyncio.to_thread(client.json_line, 60)
        sent = bed.stats().links["server"]["up"].bytes - before
    finally:
        await bed.__aexit__(None, None, None)
    assert result["sha256_ok"] and result["size"] == MB << 20
    assert [a.rsplit(":", 1)[0] for a in result["addrs"]] == [client_host]
    assert sent >= MB << 20  # the blob crossed the emulated link, not loopback
    # at least the request's RTT, then the bytes at the rate
    floor = rtt + (MB << 20) * 8 / (RATE_MBIT * 1e6)
    assert floor * 0.95 <= result["seconds"] < 15, (result, floor)
