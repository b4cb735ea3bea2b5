"""Where a round's time goes, with three `cohort train` processes on loopback (localnet, iroh, real chain).

    .venv/bin/python benchmarks/client/round_time.py [--preset llama-small] [--seq 256] [--batch 24]
                                                     [--rounds 12] [--clients 3] [--p2p iroh]

Runs one epoch of steady-state rounds and prints, per round (medians over rounds and clients):
wall time (RoundTrain to the next RoundTrain, as each client saw it), each client's compute (apply of
step h-2 + forward/backward + DisTrO generate), and the rest split into: waiting for peers and witnesses
(compute done -> RoundWitness), the witness phase (RoundWitness -> next round: round_witness_time, the
pending seed's slot and the tick), and the state notification. Also bytes per client per round.
The default model is sized so one client's step computes for about two seconds on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cohort.client.runtime.local_run import LocalRun, write_config


def rounds_of(trainer) -> dict[int, dict[str, float]]:
    """Per step, the times this client saw: round start, apply, training, RoundWitness, next round."""
    out: dict[int, dict[str, float]] = {}
    for e in trainer.events():
        kind = e["event"]
        if kind == "state" and e["state"] == "RoundTrain":
            out.setdefault(e["step"], {}).setdefault("start", e["t"])
        elif kind == "state" and e["state"] == "RoundWitness":  # the round's training time is over
            step = e["step"] - 1 if e.get("seed_pending") else e["step"]  # the step moves on when it ends
            out.setdefault(step, {}).setdefault("witness_phase", e["t"])
        elif kind == "applied":
            out.setdefault(e["step"] + 2, {})["apply"] = e.get("seconds", 0.0)
        elif kind == "trained":
            r = out.setdefault(e["step"], {})
            r["compute"], r["trained_at"], r["bytes"] = e["seconds"], e["t"], e["bytes"]
    for step, r in out.items():
        nxt = out.get(step + 1, {})
        if "start" in nxt:
            r["end"] = nxt["start"]
    return out


async def main(args: argparse.Namespace) -> None:
    console = Console()
    with tempfile.TemporaryDirectory(prefix="cohort-bench-") as tmp:
        root = Path(tmp)
        config = write_config(root / "run.toml", preset=args.preset, max_seq_len=args.seq,
                              global_batch_size_start=args.batch, global_batch_size_end=args.batch,
                              epoch_time=600, max_round_train_time=60, warmup_time=60,
                              init_min_clients=args.clients, num_parameters=0)  # fmt: skip
        async with LocalRun(config=config, root=root, trainer_args=("--p2p", args.p2p)) as lr:
            wallets = [lr.new_wallet(f"c{i}") for i in range(args.clients)]
            for w, _ in wallets:
                await lr.fund(w)
            await lr.create_run([w for w, _ in wallets])
            trainers = [lr.start_trainer(f"c{i}", w) for i, w in enumerate(wallets)]
            first = await lr.wait_for(lambda r: r.state.value == "RoundTrain", 300, "the first round")
            target = first.progress.step + args.rounds + 3
            await lr.wait_for(lambda r: r.progress.step >= target, 60 * args.rounds, f"{args.rounds} rounds")
            per_client = [rounds_of(t) for t in trainers]
    skip = first.progress.step + 2  # the first two rounds apply nothing: not steady state
    steps = sorted({s for rounds in per_client for s in rounds if s >= skip})
    rows, slowest = [], []
    for step in steps:
        seen = [r[step] for r in per_client if step in r]
        complete = [r for r in seen if {"start", "end", "compute", "trained_at", "witness_phase"} <= r.keys()]
        if len(complete) == len(per_client):
            rows += complete
            slowest.append(max(r["compute"] + r.get("apply", 0.0) for r in complete))
    if not rows:
        raise SystemExit("no complete steady-state rounds were recorded")

    def med(f) -> float:
        return statistics.median(f(r) for r in rows)

    wall = med(lambda r: r["end"] - r["start"])
    compute = med(lambda r: r["compute"] + r.get("apply", 0.0))
    slow = statistics.median(slowest)
    waiting = med(lambda r: r["witness_phase"] - r["trained_at"])
    witness_phase = med(lambda r: r["end"] - r["witness_phase"])
    before = med(lambda r: r["trained_at"] - r["compute"] - r.get("apply", 0.0) - r["start"])
    payload = med(lambda r: r["bytes"])
    table = Table(title=f"{args.clients} clients, {args.preset}, {args.batch}×{args.seq} tokens a round, "
                        f"{args.p2p}, {len(slowest)} rounds")  # fmt: skip
    table.add_column("per round (median)")
    table.add_column("seconds", justify="right")
    table.add_column("share of wall", justify="right")
    for name, value in [
        ("wall time (round start → next round start)", wall),
        ("compute of a client: apply(h-2) + fwd/bwd + DisTrO", compute),
        ("compute of the round's slowest client", slow),
        ("before compute (scheduling, data)", before),
        ("waiting: peers' results, Finished, witnesses", waiting),
        ("round end → next round: witness time, seed slot, tick", witness_phase),
    ]:
        table.add_row(name, f"{value:.3f}", f"{value / wall:.0%}")
    console.print(table)
    console.print(f"not computing: {1 - slow / wall:.0%} of the round beyond its slowest client's compute "
                  f"({1 - compute / wall:.0%} for a median client: {args.clients} clients share this machine's "
                  f"{os.cpu_count()} cores); result payload {payload:,.0f} bytes per client per round, sent "
                  f"once to each peer that fetches it (~{payload * (args.clients - 1):,.0f} bytes up, as much down)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="llama-small")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--p2p", default="iroh", choices=["iroh", "http"])
    asyncio.run(main(parser.parse_args()))
