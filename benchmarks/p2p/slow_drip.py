"""Slow drip: how long a provider that sends one byte every few seconds holds a blob fetch.

    .venv/bin/python benchmarks/p2p/slow_drip.py [--size-kib 1024] [--every 4] [--give-up 120]

Two providers on 127.0.0.1 (plain HTTP transport), both announcing the same blob: the first (tried
first, like the announcer) sends the length prefix and then one byte every `--every` seconds, the
second serves it honestly. The fetcher uses the default `FetchPolicy`. Printed: the time until the
verified blob is in hand, or that it was still held after `--give-up` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from cohort.client.p2p import (
    Allowlist,
    BlobFetcher,
    BlobServer,
    BlobStore,
    HttpTransport,
    NodeKey,
    blob_hash,
)
from cohort.client.p2p.blob_protocol import BLOB_PROTOCOL, LENGTH_PREFIX


async def main(size: int, every: float, give_up: float) -> None:
    data = os.urandom(size)
    keys = [NodeKey.generate() for _ in range(3)]
    allow = Allowlist(k.node_id for k in keys)

    async def drip(peer, request, reply):
        await reply.write(LENGTH_PREFIX.pack(len(data)))
        for i in range(len(data)):
            await reply.write(data[i : i + 1])
            await asyncio.sleep(every)

    store = BlobStore()
    store.put(data, 0)
    dripper = HttpTransport(keys[1], allow)
    dripper.add_protocol(BLOB_PROTOCOL, drip, max_request=32)
    honest = HttpTransport(keys[2], allow)
    BlobServer([store]).register(honest)
    client = HttpTransport(keys[0], allow)
    for transport in (dripper, honest, client):
        await transport.start()
    try:
        fetcher = BlobFetcher(client, BlobStore())
        print(f"policy: {fetcher.policy}")
        started = time.monotonic()
        try:
            async with asyncio.timeout(give_up):
                result = await fetcher.fetch_detailed(
                    blob_hash(data), [dripper.address, honest.address]
                )
        except TimeoutError:
            print(f"{size} B blob, 1 byte every {every:g} s: still held after {give_up:g} s")
            return
        elapsed = time.monotonic() - started
        failed = "; ".join(a.error for a in result.failed)
        print(f"{size} B blob, 1 byte every {every:g} s: fetched in {elapsed:.1f} s ({failed})")
    finally:
        for transport in (client, dripper, honest):
            await transport.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-kib", type=int, default=1024)
    parser.add_argument("--every", type=float, default=4.0)
    parser.add_argument("--give-up", type=float, default=120.0)
    args = parser.parse_args()
    asyncio.run(main(args.size_kib << 10, args.every, args.give_up))
