"""Measurement programs for the bed, run inside a node (stdlib only; one JSON line on stdout).

    python probe.py udp-echo  --bind ADDR:PORT                 servers print {"port": P} when ready,
    python probe.py udp-ping  --to ADDR:PORT --count N --interval S
    python probe.py tcp-sink  --bind ADDR:PORT --warmup S      then their result when done
    python probe.py tcp-send  --to ADDR:PORT --seconds S
    python probe.py udp-sink  --bind ADDR:PORT --idle S
    python probe.py udp-flood --to ADDR:PORT --count N --size B --rate BYTES_PER_S

Every program stops after --timeout seconds at the latest. Clocks: both ends read CLOCK_MONOTONIC,
which is one clock for all namespaces of a machine, so one-way delays are measured directly.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import time

IP_UDP = 28  # IPv4 + UDP header bytes: what the links count besides the payload
STAMP = struct.Struct(">Qd")  # sequence number, send time (monotonic seconds)
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # Linux; not in Python's socket module


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _ready(sock: socket.socket) -> None:
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)


def _big_buffer(sock: socket.socket, forced: int, plain: int) -> None:
    """8 MiB of socket buffer, past net.core.*mem_max when root: a probe that loses datagrams in its
    own buffer while the scheduler runs someone else would be blamed on the link."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, forced, 8 << 20)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, plain, 8 << 20)


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "min": ordered[0],
        "median": statistics.median(ordered),
        "mean": statistics.fmean(ordered),
        "max": ordered[-1],
        "stdev": statistics.pstdev(ordered),
    }


def udp_echo(args: argparse.Namespace) -> dict[str, object]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(_addr(args.bind))
    _ready(sock)
    until, echoed = time.monotonic() + args.timeout, 0
    while (left := until - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data, peer = sock.recvfrom(65536)
        except TimeoutError:
            break
        sock.sendto(data, peer)
        echoed += 1
    return {"echoed": echoed}


def udp_ping(args: argparse.Namespace) -> dict[str, object]:
    """Send `count` stamped pings `interval` apart; each echo gives one RTT. After the last ping,
    wait at most `linger` s for the stragglers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(_addr(args.to))
    payload = b"\0" * max(0, args.size - STAMP.size)
    rtts: dict[int, float] = {}
    start = time.monotonic()
    until, linger_until, sent = start + args.timeout, start + args.timeout, 0
    while (now := time.monotonic()) < until:
        if sent < args.count:
            wake = start + sent * args.interval
            if now >= wake:
                sock.send(STAMP.pack(sent, now) + payload)
                sent += 1
                linger_until = min(until, now + args.linger)
                continue
        elif len(rtts) >= sent or now >= linger_until:
            break
        else:
            wake = linger_until
        sock.settimeout(max(min(wake, until) - now, 0.0001))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        seq, stamp = STAMP.unpack_from(data)
        rtts[seq] = (time.monotonic() - stamp) * 1000
    rtt = [rtts[k] for k in sorted(rtts)]
    return {"sent": sent, "received": len(rtts), "rtt_ms": _summary(rtt), "rtts_ms": rtt}


def tcp_sink(args: argparse.Namespace) -> dict[str, object]:
    """Receive one connection to EOF. goodput counts only bytes after `warmup` s (slow start);
    after a loss it can read high for a while (the hole's retransmission releases data that had
    crossed the link earlier), so windows should be long or the link lossless. average: all bytes."""
    listener = socket.create_server(_addr(args.bind))
    _ready(listener)
    listener.settimeout(args.timeout)
    conn, _ = listener.accept()
    until = time.monotonic() + args.timeout
    total = after_warmup = 0
    first = last = warm_from = 0.0
    while (left := until - time.monotonic()) > 0:
        conn.settimeout(left)
        try:
            n = len(conn.recv(1 << 20))
        except TimeoutError:
            break
        if n == 0:
            break
        now = time.monotonic()
        first = first or now
        last = now
        total += n
        if now - first >= args.warmup:
            if warm_from:
                after_warmup += n
            else:  # this chunk opens the window; it crossed the link before it
                warm_from = now
    steady = after_warmup / (last - warm_from) if warm_from and last > warm_from else 0.0
    seconds = last - first
    return {
        "bytes": total,
        "seconds": seconds,
        "goodput_bytes_s": steady,
        "average_bytes_s": total / seconds if seconds > 0 else 0.0,
        "mss": conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG),
    }


def tcp_send(args: argparse.Namespace) -> dict[str, object]:
    conn = socket.create_connection(_addr(args.to), timeout=args.timeout)
    chunk = b"\0" * (1 << 16)
    sent, until = 0, time.monotonic() + args.seconds
    while time.monotonic() < until:
        sent += conn.send(chunk)
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(args.timeout)
    conn.recv(1)  # wait for the sink's close: every byte has arrived
    return {"sent": sent}


def udp_sink(args: argparse.Namespace) -> dict[str, object]:
    """Count stamped datagrams until `idle` s pass without one (or the timeout)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _big_buffer(sock, SO_RCVBUFFORCE, socket.SO_RCVBUF)
    sock.bind(_addr(args.bind))
    _ready(sock)
    until = time.monotonic() + args.timeout
    seen: set[int] = set()
    owd, highest, reordered, duplicates, wire_bytes = [], -1, 0, 0, 0
    first = last = 0.0
    while (left := until - time.monotonic()) > 0:
        sock.settimeout(min(left, args.idle) if seen else left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        now = time.monotonic()
        seq, stamp = STAMP.unpack_from(data)
        if seq in seen:
            duplicates += 1
            continue
        seen.add(seq)
        first = first or now
        last = now
        reordered += seq < highest
        highest = max(highest, seq)
        owd.append((now - stamp) * 1000)
        wire_bytes += len(data) + IP_UDP
    span = last - first
    return {
        "received": len(seen),
        "reordered": reordered,
        "duplicates": duplicates,
        "owd_ms": _summary(owd),
        "wire_bytes": wire_bytes,
        "seconds": span,
        "wire_rate_bytes_s": wire_bytes / span if span > 0 else 0.0,
    }


def udp_flood(args: argparse.Namespace) -> dict[str, object]:
    """Send `count` stamped datagrams of `size` payload bytes, paced to `rate` wire bytes/s."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _big_buffer(sock, SO_SNDBUFFORCE, socket.SO_SNDBUF)
    sock.connect(_addr(args.to))
    pad = b"\0" * max(0, args.size - STAMP.size)
    gap = (args.size + IP_UDP) / args.rate
    start = time.monotonic()
    failed = 0
    for seq in range(args.count):
        wait = start + seq * gap - time.monotonic()
        if wait > 0:  # no spinning (it would steal the router's core): bursts of <= 0.5 ms
            time.sleep(max(wait, 0.0005))
        try:
            sock.send(STAMP.pack(seq, time.monotonic()) + pad)
        except OSError:  # ENOBUFS: our own socket queue, not the emulated link
            failed += 1
    return {"sent": args.count - failed, "send_failed": failed, "seconds": time.monotonic() - start}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for name, fn in (
        ("udp-echo", udp_echo),
        ("udp-ping", udp_ping),
        ("tcp-sink", tcp_sink),
        ("tcp-send", tcp_send),
        ("udp-sink", udp_sink),
        ("udp-flood", udp_flood),
    ):
        p = sub.add_parser(name)
        p.add_argument("--timeout", type=float, default=30.0)
        commands[name] = (p, fn)
    for name in ("udp-echo", "tcp-sink", "udp-sink"):
        commands[name][0].add_argument("--bind", required=True)
    for name in ("udp-ping", "tcp-send", "udp-flood"):
        commands[name][0].add_argument("--to", required=True)
    commands["udp-ping"][0].add_argument("--count", type=int, default=20)
    commands["udp-ping"][0].add_argument("--interval", type=float, default=0.02)
    commands["udp-ping"][0].add_argument("--size", type=int, default=64)
    commands["udp-ping"][0].add_argument("--linger", type=float, default=3.0)
    commands["tcp-sink"][0].add_argument("--warmup", type=float, default=0.5)
    commands["tcp-send"][0].add_argument("--seconds", type=float, default=2.0)
    commands["udp-sink"][0].add_argument("--idle", type=float, default=1.0)
    commands["udp-flood"][0].add_argument("--count", type=int, default=1000)
    commands["udp-flood"][0].add_argument("--size", type=int, default=200)
    commands["udp-flood"][0].add_argument("--rate", type=float, default=1e6)
    args = parser.parse_args(argv)
    result = commands[args.command][1](args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
