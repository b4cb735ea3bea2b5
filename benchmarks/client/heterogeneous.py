"""Uneven hardware: one client with four times the others' latency and a quarter of their compute, the run's
tokens per second with adaptive shares (max_share_ratio = 4: a member's share of each batch follows the
tokens/s it measured and declared at its join) against equal shares (max_share_ratio = 1), side by side.

    .venv/bin/python benchmarks/client/heterogeneous.py [--clients 4] [--preset llama-tiny] [--seq 256]
        [--batch 32] [--rounds 8] [--link 40|none] [--depth 2|3|4]

Every client is a `cohort train` process (real training, localnet, iroh); with --link 40 each sits behind
an emulated link (tests/support/wan: needs root), the slow one at 4× the delay. The slow client's compute
is emulated with `--slowdown 4`. A member declares its throughput from the second epoch on (it has trained
nothing before its first join), so the figures come from epoch 1. Target: adaptive / equal >= 1.25×.

Real training of four clients saturates a 2-core machine (with the link emulator's router on top, more
work for the fast clients slows everyone's compute), which hides what shares buy; `--synthetic 0.1`
emulates the compute as time (the synthetic trainer: same chain, P2P and payload sizes, no training), so
the figures show the protocol's scheduling alone.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cohort.client.runtime.local_run import LocalRun, failures, write_config

ROOT = Path(__file__).resolve().parents[2]
SLOWDOWN = 4


async def measure(args: argparse.Namespace, ratio: int) -> dict[str, float]:
    placement = None
    with tempfile.TemporaryDirectory(prefix="cohort-hetero-") as tmp:
        root = Path(tmp)
        if args.link != "none":
            sys.path.insert(0, str(ROOT / "tests"))
            from support.wan import Link, WanBed

            delay = int(args.link)
            fast = Link(delay_ms=delay, rate_mbit=50, loss=0.001)
            slow = Link(delay_ms=SLOWDOWN * delay, rate_mbit=50, loss=0.001)
            nodes = {
                "rpc": fast,
                **{f"c{i}": fast for i in range(args.clients - 1)},
                f"c{args.clients - 1}": slow,
            }
            placement = WanBed(nodes)
            placement.__enter__()
        try:
            config = write_config(root / "run.toml", preset=args.preset, max_seq_len=args.seq,
                                  global_batch_size_start=args.batch, global_batch_size_end=args.batch,
                                  epoch_time=args.epoch_seconds, max_round_train_time=30, warmup_time=30,
                                  init_min_clients=args.clients, min_clients=args.clients - 1,
                                  num_parameters=0, max_share_ratio=ratio, pipeline_depth=args.depth)  # fmt: skip
            extra = (
                ("--synthetic", "--synthetic-seconds", str(args.synthetic))
                if args.synthetic
                else ()
            )
            async with LocalRun(
                config=config, root=root, placement=placement, trainer_args=extra
            ) as lr:
                slowest = args.clients - 1
                trainers = await lr.start_members(
                    args.clients,
                    options=lambda i: (
                        {"extra": ("--slowdown", str(SLOWDOWN))} if i == slowest else {}
                    ),
                )
                start = await lr.wait_for(lambda r: r.progress.epoch == 1 and r.state.value == "RoundTrain",
                                          60 + 3 * args.epoch_seconds, "epoch 1")  # fmt: skip
                skip = start.progress.step + 2
                await lr.wait_for_events("applied", 1, 60 * args.rounds, step=skip + args.rounds)
                state = await lr.state()
                problems = [f for t in trainers for f in failures(t)]
                if problems:
                    raise SystemExit(f"the run failed: {problems}")
                fastest = trainers[0]
                applied = {
                    e["step"]: e["t"]
                    for e in fastest.events("applied")
                    if skip <= e["step"] <= skip + args.rounds
                }
                seconds = (applied[skip + args.rounds] - applied[skip]) / args.rounds
                shares = {c.signer: c.share for c in state.clients}
                slow_share = shares[trainers[-1].wallet.pubkey()] / statistics.median(
                    shares.values()
                )
                slow_batch = [
                    e["batch"] for e in trainers[-1].events("trained") if e["step"] > skip
                ]
                slow_compute = [
                    e["seconds"] for e in trainers[-1].events("trained") if e["step"] > skip
                ]
                fast_compute = [e["seconds"] for e in fastest.events("trained") if e["step"] > skip]
                return {
                    "step": seconds,
                    "tokens_per_s": args.batch * args.seq / seconds,
                    "slow_share": slow_share,
                    "slow_sequences": statistics.median(b[1] - b[0] for b in slow_batch),
                    "slow_compute": statistics.median(slow_compute),
                    "fast_compute": statistics.median(fast_compute),
                }
        finally:
            if placement is not None:
                placement.__exit__(None, None, None)


async def main(args: argparse.Namespace) -> None:
    console = Console()
    link = (
        "loopback"
        if args.link == "none"
        else f"{args.link} ms one way, the slow client {SLOWDOWN * int(args.link)} ms"
    )
    trainer = f"synthetic, {args.synthetic:g} s a sequence" if args.synthetic else args.preset
    table = Table(title=f"{args.clients} clients ({link}), one with 1/{SLOWDOWN} of the compute; "
                        f"{trainer}, {args.batch}×{args.seq} tokens a step, pipeline depth {args.depth}")  # fmt: skip
    for column in ("shares", "s / step", "tokens / s", "slow client's share / median", "its sequences",
                   "its compute", "a fast client's compute"):  # fmt: skip
        table.add_column(column, justify="right")
    results = {}
    for name, ratio in (("equal", 1), ("adaptive", 4)):
        results[name] = f = await measure(args, ratio)
        table.add_row(name, f"{f['step']:.3f}", f"{f['tokens_per_s']:,.0f}", f"{f['slow_share']:.2f}",
                      f"{f['slow_sequences']:g}", f"{f['slow_compute']:.3f}", f"{f['fast_compute']:.3f}")  # fmt: skip
    console.print(table)
    console.print(f"adaptive / equal tokens per second: {results['adaptive']['tokens_per_s'] / results['equal']['tokens_per_s']:.2f}× "
                  "(target >= 1.25×)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--preset", default="llama-tiny")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--epoch-seconds", type=int, default=60)
    parser.add_argument("--link", default="40", choices=["none", "10", "20", "40"])
    parser.add_argument(
        "--depth", type=int, default=2, choices=[2, 3, 4], help="the run's pipeline_depth"
    )
    parser.add_argument(
        "--synthetic",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the synthetic trainer, SECONDS of emulated compute per sequence (0: real training)",
    )
    asyncio.run(main(parser.parse_args()))
