"""report_check on chain: a trainer's result of step s is checked iff the seed of the round of step
s + CHECK_SEED_LAG (it hashes the slot of the instruction that decided step s) draws it, by min(3, pool)
members healthy when that seed was revealed; when a strict majority of them report the check failed, a
dispute opens (the dispute tests below go on from there). One lying verifier opens nothing, and a
verifier flooding reports only evicts its own tallies."""

from __future__ import annotations

import hashlib
import random
import struct

import pytest
from solders.instruction import Instruction
from support.coordinator_chain import (
    LCG_A,
    LCG_C,
    by_index,
    check_plan,
    make_config,
    open_run,
    play_epoch,
    play_round,
    start_epoch,
)
from support.host_run import HostRun

from cohort.sdk.coordinator_core import Env
from cohort.sdk.models import Run

CLIENTS = 5
CONFIG = make_config(CLIENTS, verification_percent=100, epoch_time=600)
SHORT = make_config(CLIENTS, verification_percent=100, epoch_time=40)


def reference_draw(state: int, pool: list[int], count: int) -> tuple[int, ...]:
    """A partial Fisher-Yates over `pool` with Psyche's LCG, drawing from the high bits of each state
    (an LCG's low bits have short periods)."""
    pool, count = list(pool), min(count, len(pool))
    for k in range(count):
        state = (state * LCG_A + LCG_C) % 2**64
        j = k + state * (len(pool) - k) // 2**64
        pool[k], pool[j] = pool[j], pool[k]
    return tuple(pool[:count])


def reference_plan(seed: int, step: int, trainer: int, clients: int, percent: int,
                   healthy: set[int] | None = None) -> tuple[int, ...]:  # fmt: skip
    """The plan written out independently of the C code: sha256(seed_le || step_le || trainer_le ||
    "check"); its first 8 bytes decide the check, the next 8 seed the draw over the members healthy when
    the seed was revealed (every member by default) but the trainer; fewer than two: not checked."""
    if trainer >= clients:
        return ()
    digest = hashlib.sha256(struct.pack("<QIH", seed, step, trainer) + b"check").digest()
    if int.from_bytes(digest[:8], "little") % 10_000 >= percent * 100:
        return ()
    pool = [i for i in range(clients) if i != trainer and (healthy is None or i in healthy)]
    drawn = reference_draw(int.from_bytes(digest[8:16], "little"), pool, 3)
    return drawn if len(drawn) >= 2 else ()


def report_args(step: int, trainer: int, reason: str = "PayloadMismatch") -> dict:
    return {"step": step, "trainer": trainer, "reason": reason}


def report(chain, run, wallet, step: int, trainer: int, reason: str = "PayloadMismatch") -> list:
    """A report that must succeed; returns its events."""
    result = chain.call("report_check", wallet, run, report_args(step, trainer, reason))
    return chain.idl.events_in_logs(list(result.logs()), chain.program_id)


def refused(chain, run, wallet, step: int, trainer: int, reason: str = "PayloadMismatch") -> str:
    return chain.fails("report_check", wallet, run, report_args(step, trainer, reason))


def tallies(chain, run) -> list[dict]:
    return [t for t in chain.state(run)["failed_checks"] if t["step"]]


def rounds(chain, core, run, members, n: int) -> None:
    for _ in range(n):
        play_round(chain, core, run, members)


@pytest.fixture
def checking(chain, core):
    """(run, members by epoch index, step): an epoch of five with every result checked, in its round of
    height 3, when the seed of round 4 is revealed: the epoch's first step is checkable."""
    _, run = open_run(chain, CONFIG)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, wallets, CONFIG)
    rounds(chain, core, run, wallets, 3)
    return run, by_index(chain, run, wallets), chain.state(run)["epoch"]["start_step"]


def test_the_plan_is_drawn_by_a_later_seed_and_the_same_on_host_and_chain(chain, core, checking):
    run, members, step = checking
    lag = chain.idl.constants["CHECK_SEED_LAG"]
    state = chain.state(run)
    assert state["progress"]["step"] == step + 3 and lag == 4
    data = chain.run_bytes(run)[8:]
    seed = core.check_seed(data, step)
    assert (
        seed == state["next_seed"]
    )  # the seed of the round of step + 4, revealed when this round started
    assert core.check_seed(data, step + 1) is None  # its seed (round step + 5's) is not drawn yet
    decoded = Run.decode(run, chain.run_bytes(run), chain.idl)
    assert decoded.check_seed(step) == seed and (step, seed) in decoded.check_seeds
    plans = {t: core.check_plan(data, step, seed, t) for t in range(CLIENTS)}
    for t, verifiers in plans.items():
        assert verifiers == reference_plan(seed, step, t, CLIENTS, 100)
        assert (
            len(set(verifiers)) == 3 and t not in verifiers and all(v < CLIENTS for v in verifiers)
        )
    # the chain agrees: everyone else, and the trainer itself, is refused as no verifier of the check
    for t, verifiers in plans.items():
        for m in range(CLIENTS):
            if m not in verifiers:
                assert refused(chain, run, members[m], step, t) == "NotAVerifier", (t, m)
    # a round later the seed is read from the window: the same plan
    rounds(chain, core, run, members, 1)
    data = chain.run_bytes(run)[8:]
    assert core.check_seed(data, step) == seed
    assert {t: core.check_plan(data, step, seed, t) for t in range(CLIENTS)} == plans
    rounds(chain, core, run, members, 4)
    decoded = Run.decode(run, chain.run_bytes(run), chain.idl)
    assert decoded.check_seed(step) == core.check_seed(chain.run_bytes(run)[8:], step) == seed


def test_the_check_seed_hashes_the_slot_that_decided_the_step(chain, core):
    """The checks of step s are drawn from sha256(seed of round s + 3 || hash of the slot of the instruction
    that ended the round of step s + 1, i.e. decided step s): while step s's results are being gathered, that
    hash does not exist yet."""
    _, run = open_run(chain, CONFIG)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, wallets, CONFIG)
    members = by_index(chain, run, wallets)
    step = chain.state(run)["epoch"]["start_step"]
    rounds(
        chain, core, run, members, 1
    )  # the round of step s + 1 runs: it gathers and decides step s
    before = chain.state(run)
    assert before["progress"]["step"] == step + 1
    rounds(
        chain, core, run, members, 1
    )  # decided: that instruction started the round of s + 2 in its slot
    decided = chain.state(run)
    assert (
        decided["epoch"]["decisions"][step % 8]["step"] == step
        and decided["seed_slot"] > before["seed_slot"]
    )
    deciding_slot, seed_of_s3 = decided["seed_slot"], decided["next_seed"]
    assert core.check_seed(chain.run_bytes(run)[8:], step) is None
    rounds(chain, core, run, members, 1)
    digest = hashlib.sha256(
        struct.pack("<Q", seed_of_s3) + chain.slot_hash_of(deciding_slot)
    ).digest()
    assert core.check_seed(chain.run_bytes(run)[8:], step) == int.from_bytes(digest[:8], "little")


def test_verifiers_are_drawn_from_healthy_members_only(chain, core):
    clients = 6
    config = make_config(clients, verification_percent=100, epoch_time=600)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(clients)]
    start_epoch(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    gone = 5
    chain.call("exit_run", members[gone], run)
    start = chain.state(run)["epoch"]["start_step"]
    rounds(chain, core, run, members, 6)
    data = chain.run_bytes(run)[8:]
    healthy = {i for i in range(clients) if i != gone}
    late = (
        chain.state(run)["progress"]["step"] - 4
    )  # the seeds of both were revealed after the exit
    for step in (start, late):
        seed = core.check_seed(data, step)
        for t in range(clients):
            got = core.check_plan(data, step, seed, t)
            assert got == reference_plan(seed, step, t, clients, 100, healthy)
    assert not any(
        gone in core.check_plan(data, late, core.check_seed(data, late), t) for t in range(clients)
    )
    decoded = chain.state(run)["check_seeds"]
    entry = next(e for e in decoded if e["step"] == late + 4)
    assert not entry["healthy"][0] >> gone & 1 and entry["healthy"][0] & 0b11111 == 0b11111


def test_a_majority_of_the_verifiers_opens_a_dispute_not_a_conviction(chain, core):
    _, run = open_run(chain, SHORT)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    play_epoch(chain, core, run, wallets, SHORT)  # everyone earns points
    start_epoch(chain, run, wallets, SHORT)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 3)
    state = chain.state(run)
    step, trainer = state["epoch"]["start_step"], 2
    entry = state["clients"][trainer]["registry_index"]
    earned = state["registry"][entry]["earned"]
    first, second, _third = check_plan(chain, core, run, step, trainer)

    events = report(chain, run, members[first], step, trainer, "StateMismatch")
    assert events == [("CheckFailed", {"run": run, "verifier": members[first].pubkey(), "step": step,
                                       "trainer": trainer, "reason": "StateMismatch", "reports": 1})]  # fmt: skip
    assert tallies(chain, run) == [{"step": step, "trainer": trainer, "reporters": 1, "opener": first,
                                    "replay": 1, "_pad": b"\0\0\0"}]  # fmt: skip
    for reason in (
        "StateMismatch",
        "PayloadMismatch",
    ):  # once per verifier and check, whatever the reason
        assert refused(chain, run, members[first], step, trainer, reason) == "DuplicateReport"
    assert refused(chain, run, members[second], step, trainer, "Passed") == "InvalidReason"

    events = report(chain, run, members[second], step, trainer, "ResultNotDelivered")
    now = chain.state(run)["progress"]["step"]
    assert events == [
        ("CheckFailed", {"run": run, "verifier": members[second].pubkey(), "step": step, "trainer": trainer,
                         "reason": "ResultNotDelivered", "reports": 2}),
        ("DisputeOpened", {"run": run, "step": step, "trainer": trainer, "reporters": 0b11, "_pad": 0,
                           "seed_step": now + 3}),
    ]  # fmt: skip
    after = chain.state(run)
    assert (
        after["clients"][trainer]["state"] == "Healthy"
        and after["registry"][entry]["earned"] == earned
    )
    assert [d for d in after["disputes"] if d["step"]] == [
        {"step": step, "trainer": trainer, "reporters": 0b11, "replay": 0b01, "seed_step": now + 3,
         "fails": bytes(32), "passes": bytes(32)}]  # fmt: skip


def test_refusals(chain, core, checking):
    run, members, step = checking
    trainer = 0
    verifier = check_plan(chain, core, run, step, trainer)[0]
    wallet = members[verifier]
    assert refused(chain, run, chain.wallet(), step, trainer) == "NotInEpoch"  # no member
    assert refused(chain, run, wallet, step, CLIENTS) == "NotInEpoch"  # no trainer
    assert refused(chain, run, wallet, step, 65535) == "NotInEpoch"
    assert refused(chain, run, wallet, step, verifier) == "NotAVerifier"  # its own step
    # not drawn yet: the seed of the round of the step being trained, or of a later one, is unknown
    now = chain.state(run)["progress"]["step"]
    for future in (step + 1, now, now + 1, 2**32 - 1):
        assert refused(chain, run, wallet, future, trainer) == "WrongStep", future
    assert refused(chain, run, wallet, step - 1, trainer) == "CheckExpired"  # before the epoch
    # unknown reasons and padding; Passed is for a dispute's committee only
    for reason in (0, 6, 255):
        ix = Raw.ix(chain, run, wallet, step, trainer, reason)
        assert chain.send_fails([ix], [wallet], run).name == "InvalidReason", reason
    assert refused(chain, run, wallet, step, trainer, "Passed") == "InvalidReason"
    ix = Raw.ix(chain, run, wallet, step, trainer, 1, pad=1)
    assert chain.send_fails([ix], [wallet], run).name == "NonCanonical"
    chain.send([Raw.ix(chain, run, wallet, step, trainer, 4)], [wallet])  # ResultNotDelivered
    assert tallies(chain, run) == [{"step": step, "trainer": trainer, "reporters": 1, "opener": verifier,
                                    "replay": 0, "_pad": b"\0\0\0"}]  # fmt: skip


class Raw:
    """report_check data with bytes the IDL coder would refuse."""

    @staticmethod
    def ix(chain, run, wallet, step: int, trainer: int, reason: int, pad: int = 0) -> Instruction:
        ix = chain.call_ix("report_check", wallet, run, report_args(step, trainer))
        data = bytes(ix.data)[:-2] + bytes([reason, pad])
        return Instruction(ix.program_id, data, ix.accounts)


def test_checks_expire_with_their_seed_and_their_epoch(chain, core):
    _, run = open_run(chain, CONFIG)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    assert refused(chain, run, wallets[0], 1, 1) == "InvalidRunState"  # WaitingForMembers
    start_epoch(chain, run, wallets, CONFIG)
    members = by_index(chain, run, wallets)
    step = chain.state(run)["epoch"]["start_step"]
    window, lag = chain.idl.constants["CHECK_WINDOW"], chain.idl.constants["CHECK_SEED_LAG"]
    # the seed of the round of step + lag is kept while the newest revealed seed (the next round's) is at
    # most window - 1 later
    rounds(chain, core, run, members, lag + window - 2)
    assert chain.state(run)["progress"]["step"] + 1 == step + lag + window - 1
    a = check_plan(chain, core, run, step, 1)[0]
    c = check_plan(chain, core, run, step, 2)[0]
    report(chain, run, members[a], step, 1)
    rounds(chain, core, run, members, 1)
    assert core.check_seed(chain.run_bytes(run)[8:], step) is None
    b = check_plan(chain, core, run, step + 1, 1)[0]
    assert refused(chain, run, members[c], step, 2) == "CheckExpired"
    report(chain, run, members[b], step + 1, 1)
    # Cooldown still takes reports of the epoch; WaitingForMembers and the next epoch do not
    while chain.state(run)["run_state"] == "RoundTrain":
        chain.advance(CONFIG["epoch_time"])
        play_round(chain, core, run, members)
    assert chain.state(run)["run_state"] == "Cooldown"
    # the flush round (the step before progress.step) revealed the seed of the round after it: the last
    # checkable step is the one lag before that until Cooldown reveals more (its pace, the epoch's mean round
    # time, is longer than this Cooldown here; the next test has them)
    late = chain.state(run)["progress"]["step"] - lag
    assert refused(chain, run, members[0], late + 1, 1) == "WrongStep"
    verifier = check_plan(chain, core, run, late, 0)[0]
    report(chain, run, members[verifier], late, 0)
    chain.advance(CONFIG["cooldown_time"])
    chain.call("tick", members[0], run)
    assert refused(chain, run, members[verifier], late, 3) == "InvalidRunState"
    start_epoch(chain, run, wallets, CONFIG)
    state = chain.state(run)
    new_start = state["epoch"]["start_step"]
    assert (
        tallies(chain, run) == []
    )  # cleared with the window, which now holds this epoch's two first seeds
    assert sorted(e["step"] for e in state["check_seeds"] if e["step"]) == [
        new_start,
        new_start + 1,
    ]
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 2)
    other = 3 if verifier != 3 else 2  # a trainer other than the reporter (never its own verifier)
    assert (
        refused(chain, run, members[verifier], late, other) == "CheckExpired"
    )  # a step of the last epoch


def test_nothing_is_checked_at_zero_percent(chain, core):
    config = make_config(CLIENTS, verification_percent=0)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 4)
    data = chain.run_bytes(run)[8:]
    start = chain.state(run)["epoch"]["start_step"]
    for step in (start, start + 1):
        seed = core.check_seed(data, step)
        assert seed is not None
        for t in range(CLIENTS):
            assert (
                core.check_plan(data, step, seed, t)
                == ()
                == reference_plan(seed, step, t, CLIENTS, 0)
            )
            assert refused(chain, run, members[(t + 1) % CLIENTS], step, t) == "NotChecked"


def test_three_members_need_both_verifiers_twice(chain, core):
    config = make_config(3, verification_percent=100)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(3)]
    start_epoch(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 3)
    step = chain.state(run)["epoch"]["start_step"]
    verifiers = check_plan(chain, core, run, step, 0)
    assert sorted(verifiers) == [1, 2]
    assert [name for name, _ in report(chain, run, members[verifiers[0]], step, 0)] == [
        "CheckFailed"
    ]
    assert [name for name, _ in report(chain, run, members[verifiers[1]], step, 0, "StateNotDelivered")] == [
        "CheckFailed", "DisputeOpened"]  # fmt: skip
    assert chain.state(run)["clients"][0]["state"] == "Healthy"
    rounds(chain, core, run, members, 2)
    assert core.dispute_committee(chain.run_bytes(run)[8:], step, 0) == {1, 2}
    report(chain, run, members[1], step, 0)
    names = [name for name, _ in report(chain, run, members[2], step, 0, "StateNotDelivered")]
    assert names == ["DisputeReported", "DisputeClosed", "ClientConvicted"]
    assert chain.state(run)["clients"][0]["state"] == "Convicted"


def test_a_flooding_verifier_evicts_only_its_own_tallies(chain, core):
    _, run = open_run(chain, CONFIG)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, wallets, CONFIG)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 15)
    start, slots = chain.state(run)["epoch"]["start_step"], chain.idl.constants["CHECK_SLOTS"]
    steps = range(start, start + 13)  # checkable: up to the step 4 before the newest seed's
    target = (start + 4, 0)
    honest = check_plan(chain, core, run, *target)
    report(chain, run, members[honest[0]], *target)
    drawn = {m: [(s, t) for s in steps for t in range(CLIENTS) if (s, t) != target and m in check_plan(chain, core, run, s, t)]
             for m in range(1, CLIENTS) if m not in honest[:2]}  # fmt: skip
    liar = max(drawn, key=lambda m: len(drawn[m]))  # the liar: the other verifier drawn most often
    lies = drawn[liar]
    assert len(lies) > slots + 4
    for s, t in lies:  # the liar's tallies fill the table, then replace each other
        report(chain, run, members[liar], s, t)
    table = tallies(chain, run)
    assert len(table) == slots
    assert [(t["step"], t["trainer"], t["opener"]) for t in table if t["opener"] != liar] == [
        (*target, honest[0])
    ]
    assert all(
        c["state"] == "Healthy" for c in chain.state(run)["clients"][:CLIENTS]
    )  # a minority each
    assert not any(d["step"] for d in chain.state(run)["disputes"])
    events = report(chain, run, members[honest[1]], *target)
    assert [name for name, _ in events] == ["CheckFailed", "DisputeOpened"]


def test_the_share_checked_follows_verification_percent(core):
    """On the host core: the plan is the reference's for any seed, checks about `percent` of the results,
    and draws each other member about equally often; an epoch of two checks nothing (one verifier alone
    would convict)."""
    rng = random.Random(7)
    for percent in (30, 100):
        host = HostRun(core, clients=CLIENTS, verification_percent=percent)
        host.to_warmup()
        data = bytes(host.state)
        draws = [
            (rng.getrandbits(64), rng.randrange(1, 2**32), rng.randrange(CLIENTS))
            for _ in range(3000)
        ]
        plans = [core.check_plan(data, step, seed, t) for seed, step, t in draws]
        assert plans == [reference_plan(seed, step, t, CLIENTS, percent) for seed, step, t in draws]
        checked = [p for p in plans if p]
        assert abs(len(checked) / len(plans) - percent / 100) < 0.03
        drawn = [v for p in checked for v in p]
        assert all(abs(drawn.count(m) / len(drawn) - 1 / CLIENTS) < 0.03 for m in range(CLIENTS))
    pair = HostRun(core, clients=2, verification_percent=100)
    pair.to_warmup()
    assert all(
        core.check_plan(bytes(pair.state), 1, seed, t) == () for seed in range(50) for t in (0, 1)
    )


# -- disputes --------------------------------------------------------------------------------------
# Disputes on chain: a check a strict majority of its verifiers failed opens a dispute, not a conviction. Its
# committee, min(DISPUTE_VERIFIERS, pool) members healthy when the seed of the round DISPUTE_SEED_LAG after the
# opening one was revealed (so nobody knew it when the dispute opened), replays the same step and reports
# Passed or a failure; a strict majority of the committee convicts the trainer (FailedVerification) or refutes
# the reporters, convicting those that claimed a replay mismatch (FalseReport). A dispute without a majority
# by the round of step + DISPUTE_HORIZON lapses; at most MAX_DISPUTES are open at once.

MANY = 7  # members of the dispute tests' epochs
MANY_CONFIG = make_config(MANY, verification_percent=100, epoch_time=600)
MANY_SHORT = make_config(MANY, verification_percent=100, epoch_time=40)
CU_LIMIT = 200_000


def open_dispute(chain, core, run, members, step: int, trainer: int,
                 reasons: tuple[str, str] = ("PayloadMismatch", "PayloadMismatch")) -> tuple[int, ...]:  # fmt: skip
    """Two of the check's three verifiers report: a dispute opens. Returns the check's verifiers."""
    verifiers = check_plan(chain, core, run, step, trainer)
    report(chain, run, members[verifiers[0]], step, trainer, reasons[0])
    names = [
        name for name, _ in report(chain, run, members[verifiers[1]], step, trainer, reasons[1])
    ]
    assert names == ["CheckFailed", "DisputeOpened"]
    return verifiers


def reference_committee(chain, core, run, step: int, trainer: int) -> frozenset[int]:
    """sha256(seed_le || step_le || trainer_le || "dispute")[0..8] starts the draw over the members healthy
    when the committee's seed was revealed, but the trainer."""
    state = chain.state(run)
    (dispute,) = [d for d in state["disputes"] if d["step"] == step and d["trainer"] == trainer]
    (entry,) = [e for e in state["check_seeds"] if e["step"] == dispute["seed_step"]]
    digest = hashlib.sha256(struct.pack("<QIH", entry["seed"], step, trainer) + b"dispute").digest()
    clients = state["epoch"]["clients_len"]
    pool = [i for i in range(clients) if i != trainer and entry["healthy"][i // 8] >> (i % 8) & 1]
    size = chain.idl.constants["DISPUTE_VERIFIERS"]
    return frozenset(reference_draw(int.from_bytes(digest[:8], "little"), pool, size))


def send_report(chain, run, wallet, step: int, trainer: int, reason: str):
    return chain.call(
        "report_check", wallet, run, {"step": step, "trainer": trainer, "reason": reason}
    )


def dispute_epoch(chain, core, config=MANY_CONFIG, earn: bool = False):
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(MANY)]
    if earn:
        play_epoch(chain, core, run, wallets, config)
    start_epoch(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 4)
    return run, members, chain.state(run)["epoch"]["start_step"]


def test_a_majority_of_the_committee_convicts(chain, core):
    run, members, step = dispute_epoch(chain, core, MANY_SHORT, earn=True)
    trainer = 3
    state = chain.state(run)
    entry = state["clients"][trainer]["registry_index"]
    earned = state["registry"][entry]["earned"]
    assert earned > 0
    verifiers = open_dispute(chain, core, run, members, step, trainer)
    data = chain.run_bytes(run)[8:]
    assert core.dispute_committee(data, step, trainer) == frozenset()  # its seed is not out yet
    others = [m for m in range(MANY) if m != trainer]
    assert refused(chain, run, members[others[0]], step, trainer) == "DisputePending"
    play_round(chain, core, run, members)
    assert refused(chain, run, members[others[0]], step, trainer, "Passed") == "DisputePending"
    play_round(chain, core, run, members)
    committee = core.dispute_committee(chain.run_bytes(run)[8:], step, trainer)
    assert committee == reference_committee(chain, core, run, step, trainer) == frozenset(others)
    assert refused(chain, run, members[trainer], step, trainer, "Passed") == "NotAVerifier"
    quorum = len(committee) // 2 + 1
    voters = sorted(committee)
    for k, m in enumerate(voters[: quorum - 1]):
        result = send_report(
            chain, run, members[m], step, trainer, "StateMismatch" if k % 2 else "PayloadMismatch"
        )
        assert result.compute_units_consumed() < CU_LIMIT
        (event,) = chain.idl.events_in_logs(list(result.logs()), chain.program_id)
        assert event == ("DisputeReported", {"run": run, "verifier": members[m].pubkey(), "step": step,
                                             "trainer": trainer, "reason": event[1]["reason"], "_pad": 0,
                                             "fails": k + 1, "passes": 0, "committee": len(committee),
                                             "_pad2": 0})  # fmt: skip
        assert refused(chain, run, members[m], step, trainer, "Passed") == "DuplicateReport"
    assert chain.state(run)["clients"][trainer]["state"] == "Healthy"
    last = voters[quorum - 1]
    result = send_report(chain, run, members[last], step, trainer, "StateNotDelivered")
    assert result.compute_units_consumed() < CU_LIMIT
    events = chain.idl.events_in_logs(list(result.logs()), chain.program_id)
    assert [name for name, _ in events] == ["DisputeReported", "DisputeClosed", "ClientConvicted"]
    assert events[1][1] == {"run": run, "step": step, "trainer": trainer, "outcome": "Convicted", "_pad": 0,
                            "fails": quorum, "passes": 0}  # fmt: skip
    assert events[2][1]["reason"] == "FailedVerification" and events[2][1]["forfeited"] == earned
    after = chain.state(run)
    assert (
        after["clients"][trainer]["state"] == "Convicted"
        and after["registry"][entry]["earned"] == 0
    )
    assert not any(d["step"] for d in after["disputes"]) and not any(
        t["step"] for t in after["failed_checks"]
    )
    assert (
        refused(chain, run, members[verifiers[2]], step, trainer) == "NoChange"
    )  # the third verifier


def test_a_refuted_dispute_convicts_only_the_replay_claims(chain, core):
    """The verifier that claimed a replay mismatch is convicted (the committee replayed the very bytes); the
    one that claimed non-delivery is not (a trainer may serve the committee and withhold from it alone), but
    it may claim non-delivery no more this epoch: a coalition cannot keep the dispute slots and committees
    busy for free."""
    run, members, step = dispute_epoch(chain, core)
    trainer = 1
    liar, cut_off, _ = open_dispute(
        chain, core, run, members, step, trainer, ("PayloadMismatch", "StateNotDelivered")
    )
    rounds(chain, core, run, members, 2)
    committee = sorted(core.dispute_committee(chain.run_bytes(run)[8:], step, trainer))
    quorum = len(committee) // 2 + 1
    honest = [m for m in committee if m not in (liar, cut_off)]
    send_report(
        chain, run, members[liar], step, trainer, "PayloadMismatch"
    )  # the liar insists: one failure
    for m in honest[: quorum - 1]:
        send_report(chain, run, members[m], step, trainer, "Passed")
    result = send_report(chain, run, members[honest[quorum - 1]], step, trainer, "Passed")
    events = chain.idl.events_in_logs(list(result.logs()), chain.program_id)
    assert [name for name, _ in events] == ["DisputeReported", "DisputeClosed", "ClientConvicted"]
    assert events[1][1]["outcome"] == "Refuted" and (
        events[1][1]["fails"],
        events[1][1]["passes"],
    ) == (1, quorum)
    assert events[2][1]["index"] == liar and events[2][1]["reason"] == "FalseReport"
    states = [c["state"] for c in chain.state(run)["clients"][:MANY]]
    assert (
        states[liar] == "Convicted"
        and states[cut_off] == "Healthy"
        and states[trainer] == "Healthy"
    )
    assert not any(d["step"] for d in chain.state(run)["disputes"])
    # the check's tally stays: its reporters cannot open it again
    assert (
        refused(chain, run, members[cut_off], step, trainer, "StateNotDelivered")
        == "DuplicateReport"
    )
    assert chain.state(run)["clients"][cut_off]["refuted_claims"] == 1
    # another check it verifies: a non-delivery claim is refused, a replay claim still taken
    step2, trainer2 = next((s, t) for s in range(step, step + 4) for t in range(MANY)
                           if t not in (cut_off, trainer) and cut_off in check_plan(chain, core, run, s, t))  # fmt: skip
    assert (
        refused(chain, run, members[cut_off], step2, trainer2, "ResultNotDelivered")
        == "ClaimsSpent"
    )
    report(chain, run, members[cut_off], step2, trainer2, "StateMismatch")


def test_a_dispute_without_a_majority_lapses(chain, core):
    run, members, step = dispute_epoch(chain, core)
    trainer = 0
    open_dispute(chain, core, run, members, step, trainer)
    rounds(chain, core, run, members, 2)
    committee = sorted(core.dispute_committee(chain.run_bytes(run)[8:], step, trainer))
    send_report(chain, run, members[committee[0]], step, trainer, "PayloadMismatch")
    send_report(chain, run, members[committee[1]], step, trainer, "Passed")
    horizon = chain.idl.constants["DISPUTE_HORIZON"]
    while chain.state(run)["progress"]["step"] <= step + horizon:
        assert core.dispute_committee(chain.run_bytes(run)[8:], step, trainer)
        play_round(chain, core, run, members)
    assert core.dispute_committee(chain.run_bytes(run)[8:], step, trainer) == frozenset()
    assert chain.state(run)["clients"][trainer]["state"] == "Healthy"
    # the next dispute takes its slot and says it lapsed
    later = chain.state(run)["progress"]["step"] - chain.idl.constants["CHECK_SEED_LAG"]
    verifiers = check_plan(chain, core, run, later, trainer)
    report(chain, run, members[verifiers[0]], later, trainer)
    events = report(chain, run, members[verifiers[1]], later, trainer)
    assert [name for name, _ in events] == ["CheckFailed", "DisputeClosed", "DisputeOpened"]
    assert events[1][1] == {"run": run, "step": step, "trainer": trainer, "outcome": "Lapsed", "_pad": 0,
                            "fails": 1, "passes": 1}  # fmt: skip


def test_open_disputes_are_bounded(chain, core):
    run, members, step = dispute_epoch(chain, core)
    limit = chain.idl.constants["MAX_DISPUTES"]
    for trainer in range(limit):
        open_dispute(chain, core, run, members, step, trainer)
    trainer = limit
    verifiers = check_plan(chain, core, run, step, trainer)
    report(chain, run, members[verifiers[0]], step, trainer)
    before = chain.run_bytes(run)
    assert refused(chain, run, members[verifiers[1]], step, trainer) == "DisputesFull"
    assert chain.run_bytes(run) == before
    # once one closes, the report that makes the majority goes through
    rounds(chain, core, run, members, 2)
    committee = sorted(core.dispute_committee(chain.run_bytes(run)[8:], step, 0))
    for m in committee[: len(committee) // 2 + 1]:
        send_report(chain, run, members[m], step, 0, "Passed")
    names = [name for name, _ in report(chain, run, members[verifiers[1]], step, trainer)]
    assert names == ["CheckFailed", "DisputeOpened"]


def test_cooldown_reveals_the_seeds_that_check_the_epochs_last_steps(chain, core):
    """The rounds after an epoch's last never start, so Cooldown goes on revealing seeds: the k-th once k paces
    (the epoch's mean round time) of it passed, each hashing the slot the one before it froze in. The last
    trained steps are checked, a dispute opened in Cooldown draws its committee from a later seed and convicts
    there (the member is not credited when the epoch ends), and the seeds stop at COOLDOWN_SEEDS."""
    config = make_config(MANY, verification_percent=100, epoch_time=40, cooldown_time=300)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(MANY)]
    play_epoch(chain, core, run, wallets, config)  # an epoch of points to forfeit
    start_epoch(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    while chain.state(run)["run_state"] == "RoundTrain":
        play_round(chain, core, run, members)
    state, lag = chain.state(run), chain.idl.constants["CHECK_SEED_LAG"]
    assert state["run_state"] == "Cooldown" and state["cooldown_seeds"] == 0
    # the flush round (progress.step - 1) trained nothing: the last trained step is the one before it
    last, checkable = state["progress"]["step"] - 2, state["progress"]["step"] - lag
    assert refused(chain, run, members[0], checkable + 1, 1) == "WrongStep"
    decoded = Run.decode(run, chain.run_bytes(run), chain.idl)
    pace = max(
        1,
        (state["run_state_start"] - state["epoch"]["start_timestamp"])
        // (decoded.current_round.height + 1),
    )
    assert decoded.newest_seed_step == checkable + lag

    def reveal() -> dict:
        """The next seed, when its pace came: the client predicts the tick, the chain takes it."""
        before = chain.state(run)
        assert chain.fails("tick", members[0], run) == "NothingToTick"
        chain.advance(pace)
        predicted = core.tick(bytearray(chain.run_bytes(run)[8:]), Env(chain.now, bytes(32), run))
        assert predicted == 0
        chain.call("tick", members[0], run)
        after = chain.state(run)
        assert (
            after["cooldown_seeds"] == before["cooldown_seeds"] + 1
            and after["seed_slot"] > before["seed_slot"]
        )
        step = after["progress"]["step"] + after["cooldown_seeds"]
        assert Run.decode(run, chain.run_bytes(run), chain.idl).newest_seed_step == step
        (entry,) = [e for e in after["check_seeds"] if e["step"] == step]
        digest = hashlib.sha256(
            struct.pack("<Q", before["last_seed"]) + chain.slot_hash_of(before["seed_slot"])
        )
        assert entry["seed"] == after["last_seed"] == int.from_bytes(digest.digest()[:8], "little")
        return after

    reveal()
    assert refused(chain, run, members[0], last, 1) == "WrongStep"
    reveal()
    trainer = 3
    data = chain.run_bytes(run)[8:]
    assert core.check_seed(data, last) is not None
    assert Run.decode(run, chain.run_bytes(run), chain.idl).check_seed(last) == core.check_seed(
        data, last
    )
    entry = chain.state(run)["clients"][trainer]["registry_index"]
    assert chain.state(run)["registry"][entry]["earned"] > 0
    open_dispute(chain, core, run, members, last, trainer)
    others = [m for m in range(MANY) if m != trainer]
    for _ in range(chain.idl.constants["DISPUTE_SEED_LAG"] - 1):  # seed_step: the clock's step + 3
        assert refused(chain, run, members[others[0]], last, trainer) == "DisputePending"
        reveal()
    committee = core.dispute_committee(chain.run_bytes(run)[8:], last, trainer)
    assert committee == reference_committee(chain, core, run, last, trainer) == frozenset(others)
    for m in sorted(committee)[: len(committee) // 2 + 1]:
        send_report(chain, run, members[m], last, trainer, "PayloadMismatch")
    after = chain.state(run)
    assert (
        after["clients"][trainer]["state"] == "Convicted"
        and after["registry"][entry]["earned"] == 0
    )
    while chain.state(run)["cooldown_seeds"] < chain.idl.constants["COOLDOWN_SEEDS"]:
        reveal()
    chain.advance(pace * 4)
    assert chain.fails("tick", members[0], run) == "NothingToTick"  # no more seeds
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    end = chain.state(run)
    assert end["run_state"] == "WaitingForMembers" and end["cooldown_seeds"] == 0
    assert end["registry"][entry]["earned"] == 0  # not credited: convicted in the epoch's Cooldown
