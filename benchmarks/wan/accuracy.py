"""How close the WAN bed comes to its settings, and what its router costs.

    .venv/bin/python benchmarks/wan/accuracy.py            # as root; ~1 minute
    .venv/bin/python benchmarks/wan/accuracy.py --quick    # shorter floods, coarser loss figures

For each profile, node "a" sits behind the profile (both directions) and node "b" behind a
zero-delay link, so the a ↔ b path has RTT = 2 × delay, the profile's rate each way and its loss each
way. Measured from inside the namespaces with stdlib sockets (tests/support/wan/probe.py):

- RTT: median of UDP echoes 50 ms apart.
- UDP rate: a paced flood at 1.25 × the rate; IP bytes received per second.
- TCP: one Cubic flow's goodput scaled to IP bytes, after its warm-up ("steady") and over the whole
  transfer with slow start ("whole"): what TCP gets over such a path, not a property of the emulator
  (after a tail drop "steady" can read above the rate: see probe.tcp_sink).
- Loss: a flood at half the rate (at most 8000 packets/s); ± is a 95% interval.
- Router CPU: its user + system time over the UDP-rate and the TCP test's wall time (% of one
  core); "late": packets it released more than 1 ms after their due time.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.wan import Link, WanBed, WanUnavailable, measure


@dataclass(frozen=True)
class Profile:
    name: str
    link: Link


PROFILES = (
    Profile("0 ms, unlimited", Link()),
    Profile("40 ms, 50 Mbit/s, 0.1%", Link(delay_ms=40, rate_mbit=50, loss=0.001)),
    Profile("120 ms, 20 Mbit/s, 1%", Link(delay_ms=120, rate_mbit=20, loss=0.01)),
    Profile("250 ms, 5 Mbit/s", Link(delay_ms=250, rate_mbit=5)),
)
PAYLOAD, LOSS_PAYLOAD = 1200, 100
WIRE, LOSS_WIRE = PAYLOAD + 28, LOSS_PAYLOAD + 28
MAX_PPS = 8000
T = TypeVar("T")


def cpu_share(bed: WanBed, run: Callable[[], T]) -> tuple[T, float, int]:
    """run()'s result, the router's CPU over it (% of a core) and its late releases meanwhile."""
    before, started = bed.stats(), time.monotonic()
    result = run()
    after, wall = bed.stats(), time.monotonic() - started
    return (
        result,
        100 * (after.cpu_seconds - before.cpu_seconds) / wall,
        after.late_releases - before.late_releases,
    )


def measure_profile(profile: Profile, quick: bool) -> dict[str, str]:
    link = profile.link
    rtt_set = 2 * link.delay_ms
    seconds = 1.0 if quick else 2.0
    with WanBed({"a": link, "b": Link()}) as bed:
        pings = measure.rtt(bed, "a", "b", count=10 if quick else 20, interval=0.05)
        row = {
            "profile": profile.name,
            "RTT set": f"{rtt_set:.0f} ms",
            "RTT measured": f"{pings['rtt_ms']['median']:.1f} ms",
        }
        rate = link.rate_bytes
        if rate is not None:
            count = int(1.25 * rate * seconds / WIRE)
            udp, udp_cpu, udp_late = cpu_share(
                bed,
                lambda: measure.udp_flood(
                    bed, "a", "b", count, PAYLOAD, 1.25 * rate, idle=max(1.0, rtt_set / 250)
                ),
            )
            row["rate set"] = f"{link.rate_mbit:g} Mbit/s"
            row["UDP rate"] = f"{udp['wire_rate_bytes_s'] * 8 / 1e6:.2f} Mbit/s"
        else:
            udp_cpu, udp_late = math.nan, 0
            row["rate set"], row["UDP rate"] = "unlimited", "-"
        warmup = 0.5 + 6 * rtt_set / 1000
        tcp, tcp_cpu, tcp_late = cpu_share(
            bed,
            lambda: measure.tcp_rate(bed, "a", "b", seconds=warmup + seconds + 1, warmup=warmup),
        )
        scale = tcp["wire_rate_bytes_s"] / max(tcp["goodput_bytes_s"], 1e-9)  # payload -> IP bytes
        row["TCP steady / whole"] = (
            f"{tcp['wire_rate_bytes_s'] * 8 / 1e6:.1f} / "
            f"{tcp['average_bytes_s'] * scale * 8 / 1e6:.1f} Mbit/s"
        )
        flood_rate = 0.5 * rate if rate is not None else 2e6
        flood_rate = min(flood_rate, MAX_PPS * LOSS_WIRE)  # a Python sink keeps up with this
        count = min(20_000, int(flood_rate * (1.5 if quick else 3.0) / LOSS_WIRE))
        flood = measure.udp_flood(
            bed, "a", "b", count, LOSS_PAYLOAD, flood_rate, idle=max(1.0, rtt_set / 250)
        )
        lost = (flood["sent"] - flood["received"]) / flood["sent"]
        ci = 1.96 * math.sqrt(max(lost * (1 - lost), 1e-12) / flood["sent"])
        row["loss set"] = f"{100 * link.loss:g}%"
        row["loss measured"] = f"{100 * lost:.2f} ± {100 * ci:.2f}% (n={flood['sent']})"
        if flood["lost_elsewhere"]:
            row["loss measured"] += f", {flood['lost_elsewhere']} not by the router"
        row["router CPU (UDP rate / TCP)"] = (
            f"{udp_cpu:.0f}% / {tcp_cpu:.0f}%" if not math.isnan(udp_cpu) else f"- / {tcp_cpu:.0f}%"
        )
        row["late > 1 ms"] = str(udp_late + tcp_late)
    return row


def print_table(rows: list[dict[str, str]]) -> None:
    columns = list(rows[0])
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(r[c].ljust(w) for c, w in zip(columns, widths, strict=True)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter floods (about 45 s in all)")
    args = parser.parse_args()
    rows = []
    started = time.monotonic()
    for profile in PROFILES:
        try:
            rows.append(measure_profile(profile, args.quick))
        except WanUnavailable as e:
            sys.exit(f"cannot run: {e}")
        print(f"  {profile.name}: done", file=sys.stderr, flush=True)
    print_table(rows)
    print(f"\n({time.monotonic() - started:.0f} s; 'a' behind the profile, 'b' behind a zero link)")


if __name__ == "__main__":
    main()
