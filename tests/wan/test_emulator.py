"""The WAN bed measures what it is set to: RTT, rate, loss, jitter without reordering, a bounded
bottleneck buffer; and it leaves nothing behind. Measured from inside the namespaces with stdlib
sockets (support/wan/probe.py)."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.wan import Link, WanBed, WanUnavailable, cleanup_stale, measure
from support.wan.netns import list_netns
from support.wan.pipe import Pipe

pytestmark = pytest.mark.timeout(60)  # every wait inside is bounded; this bounds the sum


def within(measured: float, expected: float, relative: float, absolute: float = 0.0) -> bool:
    return abs(measured - expected) <= relative * expected + absolute


# -- the model alone (no root needed) ----------------------------------------------------------------
def test_pipe_rate_queue_and_delay():
    pipe = Pipe(
        Link(delay_ms=10, rate_mbit=8, queue_bytes=15_000, burst_bytes=3000), random.Random(1)
    )
    dues = [pipe.admit(100.0, 1000) for _ in range(20)]  # 20 kB offered at once to 1 MB/s
    passed = [d for d in dues if d is not None]
    # the bucket's 3 kB go at once, then one packet per ms, until the 15 kB buffer is full
    assert len(passed) == 18 and pipe.dropped_queue == 2
    assert passed[:3] == [100.010] * 3
    assert all(math.isclose(b - a, 0.001) for a, b in itertools.pairwise(passed[3:]))
    assert pipe.admit(100.5, 1000) is not None  # drained by then: accepted again


def test_pipe_loss_and_jitter_keep_order():
    pipe = Pipe(Link(delay_ms=20, jitter_ms=5, loss=0.1), random.Random(2))
    dues = [pipe.admit(i * 0.0001, 100) for i in range(20_000)]
    passed = [d for d in dues if d is not None]
    assert passed == sorted(passed)  # never reordered
    assert abs(pipe.dropped_loss / 20_000 - 0.1) < 5 * math.sqrt(0.1 * 0.9 / 20_000)
    sparse = Pipe(Link(delay_ms=20, jitter_ms=5), random.Random(3))
    delays = [
        sparse.admit(t * 0.05, 100) - t * 0.05 for t in range(2000)
    ]  # 50 ms apart > 2 × jitter
    assert 0.015 <= min(delays) < 0.0155 and 0.0245 < max(delays) <= 0.025
    assert within(sum(delays) / len(delays), 0.020, 0.02)


def test_unavailable_says_why(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(WanUnavailable, match="needs root"), WanBed({"a": Link()}):
        pass


# -- a real bed ---------------------------------------------------------------------------------------
def test_rtt(make_bed):
    bed = make_bed({"a": Link(delay_ms=20), "b": Link(delay_ms=10)})
    expected = 2 * (20 + 10)
    r = measure.rtt(bed, "a", "b", count=30, interval=0.02)
    assert r["received"] == 30
    assert within(r["rtt_ms"]["median"], expected, 0.05, 2), r["rtt_ms"]
    assert r["rtt_ms"]["min"] >= expected - 2, r["rtt_ms"]
    from_host = measure.rtt(bed, "host", "b", count=10, interval=0.02)  # the host's link: no delay
    assert within(from_host["rtt_ms"]["median"], 2 * 10, 0.05, 2), from_host["rtt_ms"]


def test_tcp_rate(make_bed):
    bed = make_bed({"a": Link(delay_ms=20, rate_mbit=20), "b": Link(delay_ms=10, rate_mbit=100)})
    before = bed.stats()
    r = measure.tcp_rate(bed, "a", "b", seconds=1.5, warmup=0.5)
    assert within(r["wire_rate_bytes_s"] * 8 / 1e6, 20, 0.10), r
    after = bed.stats()
    assert after.links["a"]["up"].bytes - before.links["a"]["up"].bytes >= r["bytes"]
    assert after.links["a"]["up"].dropped_loss == 0


def test_loss(make_bed):
    bed = make_bed({"a": Link(delay_ms=5, loss=0.03), "b": Link(delay_ms=5, loss=0.02)})
    n, p = 6000, 1 - (1 - 0.03) * (1 - 0.02)  # a's uplink, then b's downlink
    r = measure.udp_flood(bed, "a", "b", count=n, size=100, rate_bytes=1e6, idle=0.3)
    lost = (r["sent"] - r["received"]) / r["sent"]
    # 5 standard deviations: a false failure once in ~3 million runs
    assert abs(lost - p) <= 5 * math.sqrt(p * (1 - p) / r["sent"]), (lost, p)
    assert r["lost_elsewhere"] == 0  # every missing packet is one the router dropped on purpose
    links = bed.stats().links
    assert r["router_dropped"] == links["a"]["up"].dropped_loss + links["b"]["down"].dropped_loss
    assert r["reordered"] == r["duplicates"] == 0


def test_jitter_never_reorders(make_bed):
    bed = make_bed({"a": Link(delay_ms=10, jitter_ms=5), "b": Link()})
    flood = measure.udp_flood(bed, "a", "b", count=2000, size=100, rate_bytes=0.5e6, idle=0.3)
    assert flood["received"] == 2000 and flood["reordered"] == 0
    assert flood["owd_ms"]["min"] >= 5 - 1 and flood["owd_ms"]["max"] - flood["owd_ms"]["min"] >= 3
    # pings 25 ms apart (> 2 × jitter) see the full spread: a's uplink + a's downlink, ±5 ms each
    pings = measure.rtt(bed, "a", "b", count=30, interval=0.025)
    assert within(pings["rtt_ms"]["mean"], 20, 0.1, 2), pings["rtt_ms"]
    assert 1.5 < pings["rtt_ms"]["stdev"] < 7, pings["rtt_ms"]  # sum of two uniforms: 4.1 ms


def test_bottleneck_buffer_tail_drops(make_bed):
    rate, queue = 4e6 / 8, 20_000
    bed = make_bed({"a": Link(delay_ms=5, rate_mbit=4, queue_bytes=queue), "b": Link()})
    r = measure.udp_flood(bed, "a", "b", count=1500, size=472, rate_bytes=2 * rate, idle=0.3)
    up = bed.stats().links["a"]["up"]
    assert up.dropped_queue > 0 and r["router_dropped"] == up.dropped_queue
    assert r["lost_elsewhere"] == 0 and up.dropped_loss == 0
    assert within(r["wire_rate_bytes_s"], rate, 0.10), r
    # the worst delay is the full buffer drained at the rate (+ the bucket's burst), plus slack
    worst = 5 + (queue + Link(rate_mbit=4).burst()) / rate * 1000
    assert r["owd_ms"]["max"] <= worst + 5, (r["owd_ms"], worst)
    assert r["owd_ms"]["max"] >= 0.8 * worst  # the buffer really filled


def test_router_memory_is_capped(make_bed):
    cap = 100_000  # a 300 ms delay line at 2 MB/s would hold ~600 kB
    bed = make_bed({"a": Link(delay_ms=300), "b": Link()}, max_held_bytes=cap)
    r = measure.udp_flood(bed, "a", "b", count=1000, size=472, rate_bytes=2e6, idle=0.3)
    stats = bed.stats()
    assert stats.peak_held_bytes <= cap and stats.held_bytes == 0
    assert stats.links["a"]["up"].dropped_queue > 0 and r["lost_elsewhere"] == 0
    assert r["received"] > 0


def test_set_link_and_errors(make_bed):
    bed = make_bed({"a": Link(delay_ms=30), "b": Link()})
    assert bed.names == ["host", "a", "b"] and bed.prefix("host") == []
    assert len({bed.address(n) for n in bed.names}) == 3
    bed.set_link("a", Link(delay_ms=5), Link(delay_ms=1))
    assert bed.link("a") == (Link(delay_ms=5), Link(delay_ms=1))
    r = measure.rtt(bed, "host", "a", count=10)
    assert within(r["rtt_ms"]["median"], 6, 0.05, 2), r["rtt_ms"]
    with pytest.raises(KeyError, match="no node 'c'"):
        bed.set_link("c", Link())
    with pytest.raises(ValueError, match="loss"):
        Link(loss=1.5)
    with pytest.raises(ValueError, match="node names"):
        WanBed({"host": Link()})


def test_teardown_leaves_nothing():
    bed = WanBed({"a": Link(delay_ms=1), "b": Link()})
    with pytest.raises(RuntimeError, match="boom"):
        try:
            with bed:
                namespaces = [bed.netns("a"), bed.netns("b")]
                router, host_tun = bed.router_pid, f"cw{bed.token}"
                tracked = bed.popen("a", ["sleep", "60"])
                stray = subprocess.Popen([*bed.prefix("b"), "sleep", "60"])  # by hand: stopped too
                raise RuntimeError("boom")
        except WanUnavailable as e:
            pytest.skip(str(e))
    assert not set(namespaces) & set(list_netns())
    assert tracked.poll() is not None and stray.wait(5) is not None
    assert router is not None and not os.path.exists(f"/proc/{router}")
    assert subprocess.run(["ip", "link", "show", host_tun], capture_output=True).returncode != 0
    bed.close()  # idempotent


def test_killed_bed_router_exits_and_cleanup_stale(make_bed):
    make_bed({"a": Link()})  # skips where beds cannot run; a live bed that cleanup must spare
    mine = [n for n in list_netns() if n.startswith(f"cwan-{os.getpid()}-")]
    script = (
        "import json, sys, time; from support.wan import Link, WanBed\n"
        "bed = WanBed({'a': Link()}).__enter__()\n"
        "sleeper = bed.popen('a', ['sleep', '60'])\n"
        "print(json.dumps([bed.router_pid, bed.netns('a'), sleeper.pid]), flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    doomed = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    try:
        router, namespace, sleeper = json.loads(doomed.stdout.readline())
    finally:
        doomed.kill()  # SIGKILL: no teardown runs
        doomed.wait(10)
        doomed.stdout.close()
    deadline = time.monotonic() + 5  # the router notices its lifeline closing
    while _state(router) not in ("Z", "gone") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(router) in ("Z", "gone")  # exited (a zombie until init reaps it)
    assert namespace in list_netns()  # left behind, as after any killed run...
    assert namespace in cleanup_stale()  # ...until the next bed (or this) removes it
    assert namespace not in list_netns() and _state(sleeper) in ("Z", "gone")
    assert [n for n in list_netns() if n.startswith(f"cwan-{os.getpid()}-")] == mine


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
