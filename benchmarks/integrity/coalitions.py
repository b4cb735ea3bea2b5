"""Wrongful convictions by a coalition: the chain's check and dispute rules against honest trainers.

    .venv/bin/python benchmarks/integrity/coalitions.py            # the table (exact), then a draw check
    .venv/bin/python benchmarks/integrity/coalitions.py --trials 20000

A coalition holding a share of an epoch's members reports every honest trainer's check it can: one whose
verifiers (MAX_VERIFIERS = 3 drawn among the healthy members but the trainer) it holds a strict majority of.
It claims non-delivery (StateNotDelivered), the claim a refutation does not penalise, so an attempt costs it
nothing. Before disputes, that convicted. Now it opens a dispute: a committee of min(DISPUTE_VERIFIERS, pool)
members drawn from a seed fixed after the dispute opened replays the step; honest members report Passed and
the coalition's report failures, and only a strict majority of the committee's size convicts. Over `steps`
steps at `verification_percent`, with `members` members of which a share is the coalition:

- before: P(a given honest trainer is convicted), and P(some honest trainer is), with 2 of 3 convicting;
- after: the same with disputes, exactly (hypergeometric draws without replacement, as the chain draws),
  counting every attempt the checks allow (not capped by MAX_DISPUTES open at once, which only lowers it).

The draw check runs the chain's draw (partial Fisher-Yates with Psyche's LCG over the pool, high bits of each
state) on random seeds and compares the shares it gives with the exact ones.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import struct
from math import comb

from cohort.sdk.coordinator_core import load_idl

LCG_A, LCG_C = 6364136223846793005, 1442695040888963407
CONSTANTS = load_idl().constants
VERIFIERS, COMMITTEE = CONSTANTS["MAX_VERIFIERS"], CONSTANTS["DISPUTE_VERIFIERS"]


def tail(pool: int, bad: int, drawn: int, need: int) -> float:
    """P(at least `need` of `drawn` members drawn without replacement from `pool` are among `bad`)."""
    if drawn > pool:
        return 0.0
    return sum(
        comb(bad, j) * comb(pool - bad, drawn - j) for j in range(need, min(bad, drawn) + 1)
    ) / comb(pool, drawn)


def majority(n: int) -> int:
    return n // 2 + 1


def rates(members: int, coalition: int) -> tuple[float, float]:
    """(P(the coalition holds a majority of a check's verifiers), P(then also of the dispute committee's))
    for an honest trainer among `members`, the coalition holding `coalition` of the others."""
    pool = members - 1
    verifiers, committee = min(VERIFIERS, pool), min(COMMITTEE, pool)
    opens = tail(pool, coalition, verifiers, majority(verifiers))
    convicts = tail(pool, coalition, committee, majority(committee)) if committee >= 2 else 0.0
    return opens, convicts


def at_least_once(p: float, n: int) -> float:
    """1 - (1 - p)^n without losing small p."""
    import math

    return -math.expm1(n * math.log1p(-p)) if p < 1 else 1.0


def table(sizes: list[int], shares: list[float], steps: int, percent: int) -> list[dict]:
    rows = []
    for members in sizes:
        for share in shares:
            coalition = round(share * members)
            honest = members - coalition
            opens, convicts = rates(members, coalition)
            checks = steps * percent / 100  # checks of one trainer
            before_one = at_least_once(percent / 100 * opens, steps)
            before_any = at_least_once(percent / 100 * opens, steps * honest)
            attempts = checks * honest * opens  # disputes the coalition can open (expected)
            after_one = at_least_once(percent / 100 * opens * convicts, steps)
            after_any = at_least_once(percent / 100 * opens * convicts, steps * honest)
            rows.append({"members": members, "share": share, "coalition": coalition, "opens": opens,
                         "convicts": convicts, "attempts": attempts, "before_one": before_one,
                         "before_any": before_any, "after_one": after_one, "after_any": after_any})  # fmt: skip
    return rows


def draw(state: int, pool: list[int], count: int) -> list[int]:
    """The chain's draw (verification.c `draw`)."""
    pool, count = list(pool), min(count, len(pool))
    for k in range(count):
        state = (state * LCG_A + LCG_C) % 2**64
        j = k + state * (len(pool) - k) // 2**64
        pool[k], pool[j] = pool[j], pool[k]
    return pool[:count]


def draw_check(
    members: int, coalition: int, trials: int, rng: random.Random
) -> tuple[float, float]:
    """Shares of checks (and of disputes) whose draw gives the coalition a majority, from the chain's draw
    keyed as the chain keys it (sha256(seed || step || trainer || "check" / "dispute"))."""
    trainer, bad = (
        members - 1,
        set(range(coalition)),
    )  # indices do not matter to the draw: any layout
    pool = [i for i in range(members) if i != trainer]
    opened = convicted = 0
    for _ in range(trials):
        seed, step = rng.getrandbits(64), rng.randrange(1, 2**32)
        key = struct.pack("<QIH", seed, step, trainer)
        state = int.from_bytes(hashlib.sha256(key + b"check").digest()[8:16], "little")
        verifiers = draw(state, pool, VERIFIERS)
        opened += sum(v in bad for v in verifiers) >= majority(len(verifiers))
        later = struct.pack("<QIH", rng.getrandbits(64), step, trainer)
        state = int.from_bytes(hashlib.sha256(later + b"dispute").digest()[:8], "little")
        committee = draw(state, pool, COMMITTEE)
        convicted += sum(v in bad for v in committee) >= majority(len(committee))
    return opened / trials, convicted / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--percent", type=int, default=10, help="verification_percent")
    parser.add_argument(
        "--trials", type=int, default=4000, help="draws per configuration of the draw check"
    )
    args = parser.parse_args()
    print(f"MAX_VERIFIERS {VERIFIERS}, DISPUTE_VERIFIERS {COMMITTEE}; {args.steps} steps at "
          f"verification_percent {args.percent}; the coalition claims non-delivery on every check it can open\n")  # fmt: skip
    print(
        "| members | coalition | P(opens a dispute) per check | P(committee majority) per dispute | "
        "disputes it can open | before: a given honest trainer | before: any honest trainer | "
        "after: a given honest trainer | after: any honest trainer |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table([10, 32, 100, 256], [0.10, 0.20, 0.33], args.steps, args.percent):
        print(f"| {r['members']} | {r['share']:.0%} ({r['coalition']}) | {r['opens']:.3f} | {r['convicts']:.2e} | "
              f"{r['attempts']:.0f} | {r['before_one']:.1%} | {r['before_any']:.1%} | {r['after_one']:.1e} | "
              f"{r['after_any']:.1e} |")  # fmt: skip
    print("\ndraw check (the chain's draw on random seeds vs the exact shares):")
    rng = random.Random(30)
    for members, coalition in ((10, 3), (32, 11), (20, 9), (256, 120)):
        exact = rates(members, coalition)
        drawn = draw_check(members, coalition, args.trials, rng)
        print(f"  {members} members, coalition {coalition}: opens {drawn[0]:.3f} (exact {exact[0]:.3f}), "
              f"committee majority {drawn[1]:.4f} (exact {exact[1]:.4f})")  # fmt: skip


if __name__ == "__main__":
    main()
