"""Every adversary mode against the verifier and the chain's rules, with real processes: per mode, runs of
four clients (three honest, one adversary: tests/support/adversary.py) for two epochs on the localnet,
and an all-honest run of the same config to compare the loss with.

    .venv/bin/python benchmarks/integrity/adversaries.py [--modes flip,copy,...] [--repeats 2]
        [--verify-percent 50] [--epoch-seconds 30]

Prints per mode: runs in which the adversary was convicted, steps from the epoch's first to its
conviction (median), honest members convicted (false convictions), the verifiers' replay time as a share
of the honest clients' training time, and the honest clients' last held-out loss against the all-honest
run's at the same step. The verifier's cost grows linearly with --verify-percent: the last line gives
the rate that keeps it at 10% of training compute, and what that rate means for detection.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cohort.client.runtime.local_run import LocalRun, write_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support.adversary import MODES  # noqa: E402
from support.adversary_run import adversary  # noqa: E402

CLIENTS = 4


async def one_run(args: argparse.Namespace, mode: str | None) -> dict:
    """One run; `mode` None is the all-honest baseline."""
    with tempfile.TemporaryDirectory(prefix="cohort-adversaries-") as tmp:
        root = Path(tmp)
        config = write_config(root / "run.toml", epoch_time=args.epoch_seconds, max_round_train_time=5,
                              warmup_time=15, init_min_clients=CLIENTS, min_clients=CLIENTS - 1,
                              witness_nodes=3, verification_percent=args.verify_percent)  # fmt: skip
        cheat_at = CLIENTS - 1 if mode else None
        async with LocalRun(config=config, root=root) as lr:
            trainers = await lr.start_members(
                CLIENTS, options=lambda i: adversary(mode) if i == cheat_at else {}
            )
            honest = [t for i, t in enumerate(trainers) if i != cheat_at]
            first = await lr.wait_for(
                lambda r: r.state.value == "RoundTrain", 120, "the first round"
            )
            convicted: dict[str, int] = {}  # wallet -> step at which it was seen convicted
            until = time.monotonic() + 3 * args.epoch_seconds + 120
            while time.monotonic() < until:
                run = await lr.state()
                for c in run.clients:
                    if c.state == "Convicted":
                        convicted.setdefault(str(c.signer), run.progress.step)
                if run.progress.epoch >= first.progress.epoch + 2:
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(5)  # the last epoch's checkpoint and evaluations
            evals = [{e["step"]: e["loss"] for e in t.events("evaluated")} for t in honest]
            train = sum(e["seconds"] for t in honest for e in t.events("trained"))
            replay = sum(
                e.get("replay_seconds", 0.0) for t in honest for e in t.events("check_metrics")
            )
            cheat = str(trainers[cheat_at].wallet.pubkey()) if cheat_at is not None else None
            return {
                "convicted": cheat in convicted,
                "steps": convicted[cheat] - first.progress.step if cheat in convicted else None,
                "false": sum(str(t.wallet.pubkey()) in convicted for t in honest),
                "verify_share": replay / train if train else 0.0,
                "evals": evals,
            }


def loss_ratio(run: dict, baseline: dict) -> float | None:
    """The honest clients' held-out loss against the all-honest run's, at the last step both evaluated."""
    every = [set(e) for e in run["evals"] + baseline["evals"]]
    common = set.intersection(*every) if every else set()
    if not common:
        return None
    step = max(common)
    return statistics.median(e[step] for e in run["evals"]) / statistics.median(
        e[step] for e in baseline["evals"]
    )


async def main(args: argparse.Namespace) -> None:
    console = Console()
    modes = [m for m in args.modes.split(",") if m]
    baseline = await one_run(args, None)
    table = Table(title=f"{CLIENTS} clients (one adversary), 2 epochs of {args.epoch_seconds} s, "
                        f"verification_percent = {args.verify_percent}, {args.repeats} run(s) a mode")  # fmt: skip
    for column in ("mode", "convicted", "steps to conviction", "false convictions", "verifier compute",
                   "loss vs all-honest"):  # fmt: skip
        table.add_column(column, justify="right")
    shares = [baseline["verify_share"]]
    table.add_row(
        "(all honest)",
        "-",
        "-",
        str(baseline["false"]),
        f"{baseline['verify_share']:.0%}",
        "1.000×",
    )
    for mode in modes:
        runs = [await one_run(args, mode) for _ in range(args.repeats)]
        shares += [r["verify_share"] for r in runs]
        steps = [r["steps"] for r in runs if r["steps"] is not None]
        ratios = [ratio for r in runs if (ratio := loss_ratio(r, baseline)) is not None]
        table.add_row(mode, f"{sum(r['convicted'] for r in runs)}/{len(runs)}",
                      f"{statistics.median(steps):g}" if steps else "-", str(sum(r["false"] for r in runs)),
                      f"{statistics.median(r['verify_share'] for r in runs):.0%}",
                      f"{statistics.median(ratios):.3f}×" if ratios else "-")  # fmt: skip
    console.print(table)
    share = statistics.median(shares)
    if share > 0:
        budget = args.verify_percent * 0.10 / share
        console.print(f"verifier compute at {args.verify_percent}%: {share:.0%} of training; a 10% budget is "
                      f"verification_percent ≈ {budget:.1f}: a result is checked with that probability, so a "
                      f"full-time cheater is checked within {round(1 / max(budget / 100, 1e-9) * 2.3)} of its "
                      "steps with 90% probability")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--verify-percent", type=int, default=50)
    parser.add_argument("--epoch-seconds", type=int, default=30)
    asyncio.run(main(parser.parse_args()))
