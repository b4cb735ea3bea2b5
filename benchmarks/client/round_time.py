"""Where a round's time goes, with `cohort train` processes (localnet, iroh, real chain), on loopback or
each behind an emulated internet link (tests/support/wan: needs root for network namespaces).

    .venv/bin/python benchmarks/client/round_time.py [--preset llama-small] [--seq 256] [--batch 36]
        [--rounds 12] [--clients 3] [--link none|40|120|all] [--p2p iroh|http] [--depth 2|3|4] [--keep DIR]
    .venv/bin/python benchmarks/client/round_time.py --preset llama-tiny --seq 128 --batch 24 --link all

Runs steady-state rounds and prints, per link profile (medians over clients): the compute share (the part
of wall time a client's model is busy training, applying and evaluating: the target is >= 95% on
loopback, >= 90% at 40 ms and >= 80% at 120 ms one-way, at >= 2 s steps), the time per step (between two
of a client's trained steps), the chain's round time (between round starts, as clients saw them), the
compute per step, and where the rest of a step went: waiting for the step two back to be decided and
applied. The default (llama-small, 36 sequences of 256 tokens) computes for 2-2.5 s a step on a 2-core
machine; `--preset llama-tiny --seq 128` gives ~0.1 s steps. `--depth` sets the run's pipeline_depth (step
s trains on the weights after s - depth): 3 hides a 120 ms link behind compute entirely.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cohort.client.runtime.local_run import LocalRun, write_config

ROOT = Path(__file__).resolve().parents[2]
PROFILES = {  # one-way delay, rate, loss of every node's access link
    "none": None,
    "40": {"delay_ms": 40, "rate_mbit": 50, "loss": 0.001},
    "120": {"delay_ms": 120, "rate_mbit": 20, "loss": 0.01},
}


@dataclass
class Figures:
    share: float  # median client: busy / wall over the steady window
    share_slowest: float
    step: float  # seconds between a client's consecutive trained steps
    round: float  # seconds between the chain's round starts
    compute: float  # seconds of training + apply per step
    steps_per_min: float


def figures(trainers, skip: int, last: int, depth: int) -> Figures:
    shares, steps, computes, rounds = [], [], [], []
    for t in trainers:
        trained = {e["step"]: e for e in t.events("trained") if skip <= e["step"] <= last}
        applied = {e["step"]: e for e in t.events("apply_time")}
        evaluated = {
            e["step"]: e for e in t.events("evaluated")
        }  # a held-out evaluation every few steps
        if len(trained) < 3:
            continue
        order = sorted(trained)
        busy = sum(trained[s]["seconds"] + applied.get(s - depth, {}).get("seconds", 0.0)
                   + evaluated.get(s - 1, {}).get("seconds", 0.0) for s in order[1:])  # fmt: skip
        wall = trained[order[-1]]["t"] - trained[order[0]]["t"]
        shares.append(busy / wall)
        steps += [trained[b]["t"] - trained[a]["t"] for a, b in pairwise(order) if b == a + 1]
        computes += [
            trained[s]["seconds"] + applied.get(s - depth, {}).get("seconds", 0.0) for s in order
        ]
        starts = sorted(
            e["t"]
            for e in t.events("state")
            if e["state"] == "RoundTrain" and skip <= e["step"] <= last
        )
        rounds += [b - a for a, b in pairwise(starts)]
    if not shares:
        raise SystemExit("no steady-state steps were recorded")
    step = statistics.median(steps)
    return Figures(statistics.median(shares), min(shares), step, statistics.median(rounds) if rounds else 0.0,
                   statistics.median(computes), 60 / step)  # fmt: skip


async def measure(args: argparse.Namespace, profile: str) -> Figures:
    placement = None
    with tempfile.TemporaryDirectory(prefix="cohort-bench-") as tmp:
        root = (
            Path(args.keep) / profile if args.keep else Path(tmp)
        )  # --keep: the logs stay for reading
        root.mkdir(parents=True, exist_ok=True)
        if PROFILES[profile] is not None:
            sys.path.insert(0, str(ROOT / "tests"))
            from support.wan import Link, WanBed

            link = Link(**PROFILES[profile])  # type: ignore[arg-type]
            placement = WanBed({"rpc": link, **{f"c{i}": link for i in range(args.clients)}})
            placement.__enter__()
        try:
            config = write_config(root / "run.toml", preset=args.preset, max_seq_len=args.seq,
                                  global_batch_size_start=args.batch, global_batch_size_end=args.batch,
                                  epoch_time=900, max_round_train_time=60, warmup_time=60,
                                  init_min_clients=args.clients, num_parameters=0, pipeline_depth=args.depth)  # fmt: skip
            async with LocalRun(
                config=config, root=root, trainer_args=("--p2p", args.p2p), placement=placement
            ) as lr:
                trainers = await lr.start_members(args.clients)
                first = await lr.wait_for(
                    lambda r: r.state.value == "RoundTrain", 300, "the first round"
                )
                skip = (
                    first.progress.step + 3
                )  # past the epoch's first steps (cold caches, no apply yet)
                target = skip + args.rounds
                await lr.wait_for(
                    lambda r: r.progress.step >= target + 1,
                    60 * args.rounds,
                    f"{args.rounds} rounds",
                )
                return figures(trainers, skip, target, args.depth)
        finally:
            if placement is not None:
                placement.__exit__(None, None, None)


async def main(args: argparse.Namespace) -> None:
    console = Console()
    chosen = list(PROFILES) if args.link == "all" else [args.link]
    table = Table(title=f"{args.clients} clients, {args.preset}, {args.batch}×{args.seq} tokens a step, {args.p2p}, "
                        f"pipeline depth {args.depth}")  # fmt: skip
    for column in ("link (one way)", "compute share", "slowest client", "s / step", "steps / min",
                   "compute / step", "chain round"):  # fmt: skip
        table.add_column(column, justify="right")
    results = {}
    for profile in chosen:
        results[profile] = f = await measure(args, profile)
        link = (
            "loopback"
            if profile == "none"
            else f"{profile} ms, {PROFILES[profile]['rate_mbit']} Mbit/s, {PROFILES[profile]['loss']:.1%}"
        )  # type: ignore[index]
        table.add_row(link, f"{f.share:.0%}", f"{f.share_slowest:.0%}", f"{f.step:.3f}", f"{f.steps_per_min:.1f}",
                      f"{f.compute:.3f}", f"{f.round:.3f}")  # fmt: skip
    console.print(table)
    if "none" in results and "40" in results:
        console.print(
            f"step time at 40 ms / loopback: {results['40'].step / results['none'].step:.2f}×"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="llama-small")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=36)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--link", default="none", choices=[*PROFILES, "all"])
    parser.add_argument("--p2p", default="iroh", choices=["iroh", "http"])
    parser.add_argument(
        "--depth", type=int, default=2, choices=[2, 3, 4], help="the run's pipeline_depth"
    )
    parser.add_argument(
        "--keep", help="a directory to run in and keep (events and logs of every client)"
    )
    asyncio.run(main(parser.parse_args()))
