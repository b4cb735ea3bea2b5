"""Measure a bed's links from inside its nodes with the stdlib probes (probe.py): RTT, rate, loss.

Each function starts a server probe in `dst`, waits for its ready line, runs the client probe in
`src` and returns the probes' JSON results. Used by the self-test and the accuracy benchmark.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .bed import WanBed
from .process import NodeProcess

PROBE = str(Path(__file__).with_name("probe.py"))


def probe(bed: WanBed, node: str, *args: str) -> NodeProcess:
    """probe.py ARGS inside `node`."""
    return NodeProcess(bed, node, [sys.executable, PROBE, *args])


def _pair(
    bed: WanBed, src: str, dst: str, server: list[str], client: list[str], timeout: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(server result, client result) of one exchange; both processes are gone afterwards."""
    bound = ["--bind", f"{bed.address(dst)}:0", "--timeout", str(timeout)]
    sink = probe(bed, dst, *server, *bound)
    try:
        port = sink.json_line(10.0)["port"]
        source = probe(
            bed, src, *client, "--to", f"{bed.address(dst)}:{port}", "--timeout", str(timeout)
        )
        try:
            sent = source.json_line(timeout + 5)
            return sink.json_line(timeout + 5), sent
        finally:
            source.close()
    finally:
        sink.close()


def rtt(
    bed: WanBed,
    src: str,
    dst: str,
    count: int = 20,
    interval: float = 0.02,
    size: int = 64,
    timeout: float = 20.0,
) -> dict[str, Any]:
    """UDP echo: {"sent", "received", "rtt_ms": {min, median, mean, max, stdev}, "rtts_ms"}."""
    bound = ["--bind", f"{bed.address(dst)}:0", "--timeout", str(timeout)]
    echo = probe(bed, dst, "udp-echo", *bound)
    try:
        port = echo.json_line(10.0)["port"]
        ping = probe(
            bed,
            src,
            "udp-ping",
            "--to",
            f"{bed.address(dst)}:{port}",
            "--count",
            str(count),
            "--interval",
            str(interval),
            "--size",
            str(size),
            "--timeout",
            str(timeout),
        )
        try:
            return ping.json_line(timeout + 5)
        finally:
            ping.close()
    finally:
        echo.close()


def tcp_rate(
    bed: WanBed,
    src: str,
    dst: str,
    seconds: float = 2.0,
    warmup: float = 0.5,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """TCP bulk src → dst: {"bytes", "seconds", "goodput_bytes_s" (after warmup), "mss",
    "wire_rate_bytes_s" (goodput scaled by (MTU-sized packet)/(payload) for TCP/IP headers)}."""
    sink, _ = _pair(
        bed,
        src,
        dst,
        ["tcp-sink", "--warmup", str(warmup)],
        ["tcp-send", "--seconds", str(seconds)],
        timeout,
    )
    header = bed.mtu - sink["mss"]  # IP + TCP header incl. options, per full-size segment
    sink["wire_rate_bytes_s"] = sink["goodput_bytes_s"] * (sink["mss"] + header) / sink["mss"]
    return sink


def udp_flood(
    bed: WanBed,
    src: str,
    dst: str,
    count: int,
    size: int,
    rate_bytes: float,
    idle: float = 1.0,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Paced stamped UDP src → dst: the sink's {"received", "reordered", "owd_ms", "wire_rate_bytes_s",
    ...}, the sender's "sent" and "send_failed", "router_dropped" (what src's uplink and dst's downlink
    dropped meanwhile, on purpose) and "lost_elsewhere" (the rest: kernel queues, the probes' own
    buffers; should be 0, else the measurement overloaded something)."""
    before = bed.stats().links
    sink, sent = _pair(
        bed,
        src,
        dst,
        ["udp-sink", "--idle", str(idle)],
        ["udp-flood", "--count", str(count), "--size", str(size), "--rate", str(rate_bytes)],
        timeout,
    )
    after = bed.stats().links
    dropped = sum(
        getattr(after[node][way], kind) - getattr(before[node][way], kind)
        for node, way in ((src, "up"), (dst, "down"))
        for kind in ("dropped_loss", "dropped_queue")
    )
    return {
        **sink,
        "sent": sent["sent"],
        "send_failed": sent["send_failed"],
        "router_dropped": dropped,
        "lost_elsewhere": sent["sent"] - sink["received"] - dropped,
    }
