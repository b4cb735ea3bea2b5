"""Fetch one blob over iroh from a serving peer, bound to this namespace's address; print timings.

    python iroh_fetch.py --host ADDR --key-file KEY --peer NODE_ID --addr ADDR:PORT --blob HASH

Prints {"seconds", "size", "sha256_ok", "addrs"} as one JSON line. Run inside a WanBed node.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from cohort.client.p2p import IrohConfig, NodeId, NodeKey, P2PNode, PeerAddress, blob_hash


async def fetch(args: argparse.Namespace) -> dict[str, object]:
    key = NodeKey.from_file(args.key_file)
    peer = PeerAddress(NodeId.from_hex(args.peer), (args.addr,))
    blob = bytes.fromhex(args.blob)
    async with P2PNode.iroh(key, "wan-bed", IrohConfig(bind_host=args.host)) as node:
        addrs = list(node.address.addrs)  # what peers would be told to dial
        started = time.monotonic()
        data = await asyncio.wait_for(node.fetch_blob(blob, [peer], round=0), args.timeout)
        seconds = time.monotonic() - started
    return {
        "seconds": seconds,
        "size": len(data),
        "sha256_ok": blob_hash(data) == blob,
        "addrs": addrs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("--host", "--key-file", "--peer", "--addr", "--blob"):
        parser.add_argument(name, required=True)
    parser.add_argument("--timeout", type=float, default=30.0)
    print(json.dumps(asyncio.run(fetch(parser.parse_args()))), flush=True)


if __name__ == "__main__":
    main()
