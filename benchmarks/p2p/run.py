"""P2P benchmark: blob throughput (iroh vs plain HTTP) and gossip spread over 64 nodes.

    .venv/bin/python benchmarks/p2p/run.py            # full run (a few minutes on 2 cores)
    .venv/bin/python benchmarks/p2p/run.py --quick    # fewer repetitions, smaller gossip sample

Throughput: one serving process (`python -m cohort.client.p2p serve`) holds 1, 10 and 64 MiB blobs;
clients in this process fetch them through `BlobFetcher` (sha256-verified), one client alone and
seven at once (1→7 fan-out, aggregate MiB/s = 7 × size / time until the last one is done). Each
figure is the median over repetitions; connections are reused between repetitions, as in a run.
Everything is on loopback and both ends share this machine's cores: figures compare the stacks,
they are not link speeds.

Gossip: 64 nodes in this process, overlay degree ≤ 8, repair off. For each announcement (from a
random origin), time-to-all is the time from `publish` until the 63rd node has delivered it. Bytes
per node per announcement: announcement bytes pushed (payload level) and, for iroh, UDP bytes sent
(wire level, QUIC framing, acks and keep-alives included), averaged over nodes. All 64 nodes share
one Python thread here, so time-to-all is mostly the CPU of ~7 pushes per node run one after the
other; on a real network it is about diameter × (link latency + handling), hence the diameter column.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass

from cohort.client.p2p import (
    Allowlist,
    BlobFetcher,
    GossipConfig,
    HttpTransport,
    IrohTransport,
    NodeKey,
    P2PNode,
)
from cohort.client.p2p.peer_process import PeerProcess

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bare_iroh import bare_iroh_rate

SIZES_MB = (1, 10, 64)
FANOUT = 7
KINDS = ("iroh", "http")


def make_transport(kind: str, key: NodeKey, allowlist: Allowlist):
    return IrohTransport(key, allowlist) if kind == "iroh" else HttpTransport(key, allowlist)


@dataclass
class ThroughputRow:
    kind: str
    mode: str
    size_mb: int
    mb_per_s: float
    seconds: float
    client_cpu_ms_per_mb: float
    server_cpu_ms_per_mb: float


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def throughput(kind: str, reps: int) -> list[ThroughputRow]:
    keys = [NodeKey.generate() for _ in range(FANOUT)]
    blobs_args = [arg for i, mb in enumerate(SIZES_MB) for arg in ("--random-blob", f"{mb}:{i}")]
    rows = []
    with PeerProcess(kind, [k.node_id for k in keys], *blobs_args) as server:
        allow = Allowlist([server.address.node_id])
        clients = [make_transport(kind, k, allow) for k in keys]
        for c in clients:
            await c.start()
        try:
            for mb, blob in zip(SIZES_MB, server.blobs, strict=True):
                for mode, group in (("single", clients[:1]), (f"1→{FANOUT}", clients)):
                    times = []
                    cpu0 = _process_cpu(os.getpid()), _process_cpu(server.proc.pid)
                    for _ in range(reps):
                        started = time.perf_counter()
                        await asyncio.gather(
                            *(BlobFetcher(c).fetch(blob, [server.address]) for c in group)
                        )
                        times.append(time.perf_counter() - started)
                    moved = reps * len(group) * mb
                    client_cpu = (_process_cpu(os.getpid()) - cpu0[0]) * 1000 / moved
                    server_cpu = (_process_cpu(server.proc.pid) - cpu0[1]) * 1000 / moved
                    t = statistics.median(times)
                    rows.append(
                        ThroughputRow(
                            kind, mode, mb, len(group) * mb / t, t, client_cpu, server_cpu
                        )
                    )
                    print(
                        f"  {kind:4} {mode:6} {mb:3} MiB: {rows[-1].mb_per_s:7.0f} MiB/s",
                        file=sys.stderr,
                    )
        finally:
            for c in clients:
                await c.close()
    return rows


@dataclass
class GossipRow:
    kind: str
    nodes: int
    payload_bytes: int
    announcements: int
    median_ms: float
    max_ms: float
    max_hops: int
    pushed_bytes_per_node: float
    wire_bytes_per_node: float | None


def _udp_bytes_sent(node: P2PNode) -> int:
    stats = node.transport._endpoint.stats()
    return stats["socket:send_ipv4"].value + stats["socket:send_ipv6"].value


async def gossip_spread(kind: str, n: int, count: int, payload_bytes: int) -> GossipRow:
    keys = [NodeKey.generate() for _ in range(n)]
    nodes = [
        P2PNode(
            make_transport(kind, k, Allowlist()), "bench", gossip=GossipConfig(repair_interval=0)
        )
        for k in keys
    ]
    loop = asyncio.get_running_loop()
    arrivals: dict[bytes, list[float]] = {}

    def on_message(announcement) -> None:
        arrivals.setdefault(announcement.id, []).append(loop.time())

    for node in nodes:
        node.gossip.on_message = on_message
        await node.start()
    try:
        addresses = [node.address for node in nodes]
        for node in nodes:
            node.set_clients(addresses)
        rng = random.Random(0)

        async def announce_and_wait(round: int) -> float:
            for node in nodes:  # one announcement per round: every node keeps up
                node.advance_round(round)
            origin = rng.choice(nodes)
            started = loop.time()
            announcement = await origin.announce(round, rng.randbytes(payload_bytes))
            async with asyncio.timeout(60):
                while len(arrivals.get(announcement.id, ())) < n - 1:
                    await asyncio.sleep(0.001)
            return max(arrivals[announcement.id]) - started

        for warm in range(3):  # open the overlay's connections before measuring
            await announce_and_wait(warm)
        await asyncio.sleep(0.2)
        pushed0 = sum(node.gossip.stats.push_bytes_sent for node in nodes)
        wire0 = sum(_udp_bytes_sent(node) for node in nodes) if kind == "iroh" else 0
        spreads = [await announce_and_wait(3 + i) for i in range(count)]
        await asyncio.sleep(0.2)  # let the last duplicate pushes finish
        pushed = sum(node.gossip.stats.push_bytes_sent for node in nodes) - pushed0
        wire = sum(_udp_bytes_sent(node) for node in nodes) - wire0 if kind == "iroh" else None
    finally:
        for node in nodes:
            await node.close()
    per = n * count
    graph = {
        node.transport.node_id: {p.node_id for p in node.gossip.neighbours()} for node in nodes
    }
    return GossipRow(
        kind,
        n,
        payload_bytes,
        count,
        statistics.median(spreads) * 1000,
        max(spreads) * 1000,
        max(_eccentricity(graph, start) for start in graph),
        pushed / per,
        None if wire is None else wire / per,
    )


def _eccentricity(graph: dict, start) -> int:
    """Hops from `start` to the farthest node: the flood's critical path on a real network."""
    seen, frontier, hops = {start}, {start}, 0
    while len(seen) < len(graph) and frontier:
        frontier = {m for n in frontier for m in graph[n]} - seen
        seen |= frontier
        hops += 1
    return hops


def print_tables(
    rows: list[ThroughputRow], gossip: list[GossipRow], bare: tuple[float, float]
) -> None:
    print("\nBlob throughput on loopback (MiB/s, median; fan-out = aggregate of 7 clients)\n")
    print(f"| {'scenario':14} | " + " | ".join(f"{k:>7}" for k in KINDS) + " | iroh/HTTP |")
    print("|" + "-" * 16 + "|" + "|".join("-" * 9 for _ in KINDS) + "|-----------|")
    by = {(r.kind, r.mode, r.size_mb): r for r in rows}
    for mode in ("single", f"1→{FANOUT}"):
        for mb in SIZES_MB:
            values = [by[(k, mode, mb)].mb_per_s for k in KINDS]
            print(
                f"| {mode + f' {mb} MiB':14} | "
                + " | ".join(f"{v:7.0f}" for v in values)
                + f" | {values[0] / values[1]:9.2f} |"
            )
    single_64 = by[("iroh", "single", 64)].mb_per_s / by[("http", "single", 64)].mb_per_s
    fan_64 = by[("iroh", f"1→{FANOUT}", 64)].mb_per_s / by[("http", f"1→{FANOUT}", 64)].mb_per_s
    verdict = "met" if min(single_64, fan_64) >= 0.5 else "NOT met"
    print("\nCPU per MiB moved at 64 MiB (ms; client process, server process)\n")
    print("| scenario | " + " | ".join(f"{k} client | {k} server" for k in KINDS) + " |")
    print("|---|" + "---:|" * (2 * len(KINDS)))
    for mode in ("single", f"1→{FANOUT}"):
        cells = [
            f"{by[(k, mode, 64)].client_cpu_ms_per_mb:.1f} | {by[(k, mode, 64)].server_cpu_ms_per_mb:.1f}"
            for k in KINDS
        ]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print(
        f"\ntarget iroh >= 0.5 x HTTP at 64 MiB: {verdict} (single {single_64:.2f}, fan-out {fan_64:.2f})"
    )
    ours = by[("iroh", "single", 64)]
    print(
        f"floor: bare iroh streams (no cohort framing, allowlist or hashing), single 64 MiB: {bare[0]:.0f} MiB/s, "
        f"client {bare[1]:.1f} ms/MiB -> cohort's iroh path runs at {ours.mb_per_s / bare[0]:.2f} of it, "
        f"bare iroh at {bare[0] / by[('http', 'single', 64)].mb_per_s:.2f} of HTTP"
    )

    print("\nGossip over 64 in-process nodes (overlay degree <= 8, repair off)\n")
    print(
        "| transport | payload B | announcements | time-to-all median ms | max ms | overlay diameter (hops) | pushed B/node/ann | wire B/node/ann |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for g in gossip:
        wire = "-" if g.wire_bytes_per_node is None else f"{g.wire_bytes_per_node:.0f}"
        print(
            f"| {g.kind} | {g.payload_bytes} | {g.announcements} | {g.median_ms:.1f} | {g.max_ms:.1f} | {g.max_hops} "
            f"| {g.pushed_bytes_per_node:.0f} | {wire} |"
        )


async def main(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()[0]
    rows: list[ThroughputRow] = []
    for kind in KINDS:
        print(f"throughput, {kind} ...", file=sys.stderr)
        rows += await throughput(kind, args.reps)
    gossip = []
    for kind in KINDS:
        for payload in (256, 3900):
            print(f"gossip, {kind}, {payload} B ...", file=sys.stderr)
            gossip.append(await gossip_spread(kind, 64, args.announcements, payload))
    print("throughput, bare iroh ...", file=sys.stderr)
    bare = bare_iroh_rate(args.reps)
    print_tables(rows, gossip, bare)
    print(
        f"\nmachine: {os.cpu_count()} CPUs, 1-min load average {load_before:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end (other work on the machine lowers every figure)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"throughput": [asdict(r) for r in rows], "gossip": [asdict(g) for g in gossip]},
                f,
                indent=1,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions, 10 announcements")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--announcements", type=int, default=30)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.announcements = 3, 10
    asyncio.run(main(args))
