"""One result-sized blob fetched again and again across emulated internet links, iroh (QUIC) against the
HTTP transport, whole or in parts side by side (as a client fetches results: `FetchPolicy.lanes`
connections): what a round's fetch of a peer's result costs at a given one-way delay and loss.

    .venv/bin/python benchmarks/wan/result_fetch.py [--size 176056] [--delay 120] [--loss 0,0.01]
        [--fetches 8] [--idle 2.0]

A serving node (`python -m cohort.client.p2p serve`) in one network namespace and a fetching transport in
the root namespace, each behind its own link (`delay` ms one way, 20 Mbit/s, `loss` per packet and
link: a node-to-node packet crosses two links, so twice the delay and about twice the loss). The fetches
reuse one connection, `idle` seconds apart, as a round's fetches do. The default size is llama-small's
DisTrO payload. Needs root (tests/support/wan).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cohort.client.p2p.allowlist import Allowlist
from cohort.client.p2p.blob_fetch import BlobFetcher, FetchPolicy
from cohort.client.p2p.http_transport import HttpTransport
from cohort.client.p2p.identity import NodeId, NodeKey
from cohort.client.p2p.iroh_transport import IrohConfig, IrohTransport
from cohort.client.p2p.transport import PeerAddress

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from support.wan import Link, WanBed


def _first_line(process: subprocess.Popen, timeout: float = 30.0) -> bytes:
    deadline, line = time.monotonic() + timeout, b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            data = os.read(process.stdout.fileno(), 4096)  # type: ignore[union-attr]
            if not data:
                break
            line += data
    if not line.endswith(b"\n"):
        raise SystemExit("the serving node did not start")
    return line


async def fetches(
    kind: str, link: Link, blob_path: Path, count: int, idle: float, parts: bool
) -> list[float]:
    with WanBed({"server": link}, host=link) as bed:
        key = NodeKey.generate()
        process = bed.popen("server", [sys.executable, "-m", "cohort.client.p2p", "serve", "--transport", kind,
                                       "--host", bed.address("server"), "--allow", key.node_id.hex(),
                                       "--blob", str(blob_path), "--stdin-lifeline"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        info = json.loads(_first_line(process))
        server = PeerAddress(NodeId.from_hex(info["node_id"]), tuple(info["addrs"]))
        allow = Allowlist([server.node_id])
        transport = (IrohTransport(key, allow, IrohConfig(bind_host=bed.address("host"))) if kind == "iroh"
                     else HttpTransport(key, allow))  # fmt: skip
        await transport.start()
        try:
            times = []
            size = blob_path.stat().st_size if parts else None
            for _ in range(count):
                started = time.perf_counter()
                await BlobFetcher(transport).fetch(
                    bytes.fromhex(info["blobs"][0]), [server], expected_size=size
                )
                times.append(time.perf_counter() - started)
                await asyncio.sleep(idle)
            return times
        finally:
            await transport.close()


async def main(args: argparse.Namespace) -> None:
    table = Table(title=f"a {args.size:,}-byte blob, {args.delay} ms one way per node (RTT {4 * args.delay} ms), "
                        f"20 Mbit/s, {args.fetches} fetches {args.idle:g} s apart on the same connections")  # fmt: skip
    for column in (
        "transport",
        "fetched",
        "loss per link",
        "first (connects)",
        "median of the rest",
        "min",
        "max",
    ):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory(prefix="cohort-fetch-") as tmp:
        blob = Path(tmp) / "result.bin"
        blob.write_bytes(os.urandom(args.size))
        for loss in (float(x) for x in args.loss.split(",")):
            for kind, parts in (("iroh", False), ("iroh", True), ("http", False), ("http", True)):
                link = Link(delay_ms=args.delay, rate_mbit=20, loss=loss)
                times = await fetches(kind, link, blob, args.fetches, args.idle, parts)
                rest = times[1:]
                table.add_row(kind, f"in {FetchPolicy().lanes} parts" if parts else "whole", f"{loss:.1%}", f"{times[0]:.2f} s", f"{statistics.median(rest):.2f} s",
                              f"{min(rest):.2f} s", f"{max(rest):.2f} s")  # fmt: skip
    Console(width=140).print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=176_056)
    parser.add_argument("--delay", type=int, default=120)
    parser.add_argument("--loss", default="0,0.01")
    parser.add_argument("--fetches", type=int, default=8)
    parser.add_argument("--idle", type=float, default=2.0)
    asyncio.run(main(parser.parse_args()))
