"""report_check on chain: a trainer's result of step s is checked iff the seed of the round of step
s + CHECK_SEED_LAG (revealed only after step s was decided) draws it, by min(3, clients_len - 1) other
members; when a strict majority of them report the check failed, the trainer is convicted
(FailedVerification): ClientState Convicted, unclaimed points forfeited, ClientConvicted with the step.
One lying verifier convicts nobody, and a verifier flooding reports only evicts its own tallies."""

from __future__ import annotations

import hashlib
import random
import struct

import pytest
from solders.instruction import Instruction
from support.coordinator_chain import (
    LCG_A,
    LCG_C,
    make_config,
    make_witness,
    open_run,
    play_epoch,
    play_round,
    start_epoch,
)
from support.host_run import HostRun

from cohort.sdk.models import Run

CLIENTS = 5
CONFIG = make_config(CLIENTS, verification_percent=100, epoch_time=600)
SHORT = make_config(CLIENTS, verification_percent=100, epoch_time=40)


def reference_plan(
    seed: int, step: int, trainer: int, clients: int, percent: int
) -> tuple[int, ...]:
    """The plan written out independently of the C code: sha256(seed_le || step_le || trainer_le ||
    "check"); its first 8 bytes decide the check, the next 8 seed the LCG of a partial Fisher-Yates over
    the epoch's indices without the trainer, drawing from the high bits of each state."""
    if clients < 3 or trainer >= clients:
        return ()
    digest = hashlib.sha256(struct.pack("<QIH", seed, step, trainer) + b"check").digest()
    if int.from_bytes(digest[:8], "little") % 10_000 >= percent * 100:
        return ()
    pool = [i for i in range(clients) if i != trainer]
    state, count = int.from_bytes(digest[8:16], "little"), min(3, len(pool))
    for k in range(count):
        state = (state * LCG_A + LCG_C) % 2**64
        j = (
            k + state * (len(pool) - k) // 2**64
        )  # the high bits (an LCG's low bits have short periods)
        pool[k], pool[j] = pool[j], pool[k]
    return tuple(pool[:count])


def by_index(chain, run, wallets) -> list:
    """The wallets in epoch index order."""
    by_key = {w.pubkey(): w for w in wallets}
    state = chain.state(run)
    return [by_key[c["signer"]] for c in state["clients"][: state["epoch"]["clients_len"]]]


def plan(chain, core, run, step: int, trainer: int) -> tuple[int, ...]:
    data = chain.run_bytes(run)[8:]
    seed = core.check_seed(data, step)
    assert seed is not None, f"step {step} is not checkable now"
    return core.check_plan(data, step, seed, trainer)


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
    height 2, when the seed of round 3 is revealed: the epoch's first step is checkable."""
    _, run = open_run(chain, CONFIG)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, wallets, CONFIG)
    rounds(chain, core, run, wallets, 2)
    return run, by_index(chain, run, wallets), chain.state(run)["epoch"]["start_step"]


def test_the_plan_is_drawn_by_a_later_seed_and_the_same_on_host_and_chain(chain, core, checking):
    run, members, step = checking
    lag = chain.idl.constants["CHECK_SEED_LAG"]
    state = chain.state(run)
    assert state["progress"]["step"] == step + 2 and lag == 3
    data = chain.run_bytes(run)[8:]
    seed = core.check_seed(data, step)
    assert (
        seed == state["next_seed"]
    )  # the seed of the round of step + 3, revealed when this round started
    assert core.check_seed(data, step + 1) is None  # its seed (round step + 4's) is not drawn yet
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
    # a round later the seed is read from the round ring, then from the window: the same plan
    rounds(chain, core, run, members, 1)
    data = chain.run_bytes(run)[8:]
    assert core.check_seed(data, step) == seed
    assert {t: core.check_plan(data, step, seed, t) for t in range(CLIENTS)} == plans
    assert Run.decode(run, chain.run_bytes(run), chain.idl).check_seed(step) == seed
    rounds(chain, core, run, members, 4)
    decoded = Run.decode(run, chain.run_bytes(run), chain.idl)
    assert decoded.check_seed(step) == core.check_seed(chain.run_bytes(run)[8:], step) == seed


def test_one_report_convicts_nobody_a_majority_does(chain, core):
    _, run = open_run(chain, SHORT)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    play_epoch(chain, core, run, wallets, SHORT)  # everyone earns points
    start_epoch(chain, run, wallets, SHORT)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 2)
    state = chain.state(run)
    step, trainer = state["epoch"]["start_step"], 2
    entry = state["clients"][trainer]["registry_index"]
    earned = state["registry"][entry]["earned"]
    assert earned > 0
    first, second, third = plan(chain, core, run, step, trainer)

    events = report(chain, run, members[first], step, trainer, "StateMismatch")
    assert events == [("CheckFailed", {"run": run, "verifier": members[first].pubkey(), "step": step,
                                       "trainer": trainer, "reason": "StateMismatch", "reports": 1})]  # fmt: skip
    after = chain.state(run)
    assert (
        after["clients"][trainer]["state"] == "Healthy"
        and after["registry"][entry]["earned"] == earned
    )
    assert after["epoch"]["members_nonce"] == state["epoch"]["members_nonce"]
    assert tallies(chain, run) == [
        {"step": step, "trainer": trainer, "reporters": 1, "opener": first}
    ]
    for reason in (
        "StateMismatch",
        "PayloadMismatch",
    ):  # once per verifier and check, whatever the reason
        assert refused(chain, run, members[first], step, trainer, reason) == "DuplicateReport"

    events = report(chain, run, members[second], step, trainer, "ResultNotDelivered")
    after = chain.state(run)
    height = after["epoch"]["rounds"][after["epoch"]["rounds_head"]]["height"]
    assert events == [
        ("CheckFailed", {"run": run, "verifier": members[second].pubkey(), "step": step, "trainer": trainer,
                         "reason": "ResultNotDelivered", "reports": 2}),
        ("ClientConvicted", {"run": run, "signer": members[trainer].pubkey(), "index": trainer,
                             "reason": "FailedVerification", "_pad": 0, "step": step, "forfeited": earned}),
    ]  # fmt: skip
    convicted = after["clients"][trainer]
    assert convicted["state"] == "Convicted" and convicted["exited_height"] == height
    assert after["registry"][entry]["earned"] == 0
    assert after["epoch"]["members_nonce"] == state["epoch"]["members_nonce"] + 1
    assert tallies(chain, run) == []  # closed with the conviction
    # the third verifier's report changes nothing now; the convicted member neither witnesses nor claims
    assert refused(chain, run, members[third], step, trainer) == "NoChange"
    now = after["progress"]["step"]
    assert (
        chain.fails("witness", members[trainer], run, make_witness(trainer, 0, now))
        == "InvalidWitness"
    )
    assert chain.fails("claim_points", members[trainer], run) == "NoChange"
    # nor does it verify any more
    others = [
        t for t in range(CLIENTS) if t != trainer and trainer in plan(chain, core, run, step, t)
    ]
    for t in others:
        assert refused(chain, run, members[trainer], step, t) == "NotInEpoch"


class Raw:
    """report_check data with bytes the IDL coder would refuse."""

    @staticmethod
    def ix(chain, run, wallet, step: int, trainer: int, reason: int, pad: int = 0) -> Instruction:
        ix = chain.call_ix("report_check", wallet, run, report_args(step, trainer))
        data = bytes(ix.data)[:-2] + bytes([reason, pad])
        return Instruction(ix.program_id, data, ix.accounts)


def test_refusals(chain, core, checking):
    run, members, step = checking
    trainer = 0
    verifier = plan(chain, core, run, step, trainer)[0]
    wallet = members[verifier]
    assert refused(chain, run, chain.wallet(), step, trainer) == "NotInEpoch"  # no member
    assert refused(chain, run, wallet, step, CLIENTS) == "NotInEpoch"  # no trainer
    assert refused(chain, run, wallet, step, 65535) == "NotInEpoch"
    assert refused(chain, run, wallet, step, verifier) == "NotAVerifier"  # its own step
    # not drawn yet: the seed of the round of the step being trained, or of the next one, is unknown
    now = chain.state(run)["progress"]["step"]
    for future in (step + 1, now, now + 1, 2**32 - 1):
        assert refused(chain, run, wallet, future, trainer) == "WrongStep", future
    assert refused(chain, run, wallet, step - 1, trainer) == "CheckExpired"  # before the epoch
    # unknown reasons and padding
    for reason in (0, 5, 255):
        ix = Raw.ix(chain, run, wallet, step, trainer, reason)
        assert chain.send_fails([ix], [wallet], run).name == "InvalidReason", reason
    ix = Raw.ix(chain, run, wallet, step, trainer, 1, pad=1)
    assert chain.send_fails([ix], [wallet], run).name == "NonCanonical"
    chain.send(
        [Raw.ix(chain, run, wallet, step, trainer, 4)], [wallet]
    )  # ResultNotDelivered: the last one
    assert tallies(chain, run) == [
        {"step": step, "trainer": trainer, "reporters": 1, "opener": verifier}
    ]


def test_checks_expire_with_their_seed_and_their_epoch(chain, core):
    _, run = open_run(chain, CONFIG)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    assert refused(chain, run, wallets[0], 1, 1) == "InvalidRunState"  # WaitingForMembers
    start_epoch(chain, run, wallets, CONFIG)
    members = by_index(chain, run, wallets)
    step = chain.state(run)["epoch"]["start_step"]
    window = chain.idl.constants["CHECK_WINDOW"]
    # the seed of the round of step + 3 is kept while the newest revealed seed is at most window - 1 later
    rounds(chain, core, run, members, window + 1)
    state = chain.state(run)
    assert state["progress"]["step"] == step + window + 1  # the newest seed: step + window + 2's
    a, b = plan(chain, core, run, step, 1)[:2]
    c = plan(chain, core, run, step, 2)[0]
    report(chain, run, members[a], step, 1)
    rounds(chain, core, run, members, 1)
    assert core.check_seed(chain.run_bytes(run)[8:], step) is None
    assert (
        refused(chain, run, members[b], step, 1) == "CheckExpired"
    )  # the open tally can no longer close
    assert refused(chain, run, members[c], step, 2) == "CheckExpired"
    assert chain.state(run)["clients"][1]["state"] == "Healthy"
    # Cooldown still takes reports of the epoch; WaitingForMembers and the next epoch do not
    while chain.state(run)["run_state"] == "RoundTrain":
        chain.advance(CONFIG["epoch_time"])
        play_round(chain, core, run, members)
    assert chain.state(run)["run_state"] == "Cooldown"
    # the flush round (the step before progress.step) revealed the seed of the round after it: the last
    # checkable step is the one 3 before that (the last trained step, the flush's predecessor, never is)
    late = chain.state(run)["progress"]["step"] - 3
    assert refused(chain, run, members[0], late + 1, 1) == "WrongStep"
    verifier = plan(chain, core, run, late, 0)[0]
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
    rounds(chain, core, run, members, 3)
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


def test_three_members_need_both_verifiers(chain, core):
    config = make_config(3, verification_percent=100)
    _, run = open_run(chain, config)
    wallets = [chain.wallet() for _ in range(3)]
    start_epoch(chain, run, wallets, config)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 2)
    step = chain.state(run)["epoch"]["start_step"]
    verifiers = plan(chain, core, run, step, 0)
    assert sorted(verifiers) == [1, 2]
    assert [name for name, _ in report(chain, run, members[verifiers[0]], step, 0)] == [
        "CheckFailed"
    ]
    assert chain.state(run)["clients"][0]["state"] == "Healthy"
    assert [name for name, _ in report(chain, run, members[verifiers[1]], step, 0, "StateNotDelivered")] == [
        "CheckFailed", "ClientConvicted"]  # fmt: skip
    assert chain.state(run)["clients"][0]["state"] == "Convicted"


def test_a_flooding_verifier_evicts_only_its_own_tallies(chain, core):
    _, run = open_run(chain, CONFIG)
    wallets = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, wallets, CONFIG)
    members = by_index(chain, run, wallets)
    rounds(chain, core, run, members, 14)
    start, slots = chain.state(run)["epoch"]["start_step"], chain.idl.constants["CHECK_SLOTS"]
    steps = range(start, start + 13)  # checkable: up to the step 3 before the newest seed's
    target = (start + 4, 0)
    honest = plan(chain, core, run, *target)
    report(chain, run, members[honest[0]], *target)
    drawn = {m: [(s, t) for s in steps for t in range(CLIENTS) if (s, t) != target and m in plan(chain, core, run, s, t)]
             for m in range(1, CLIENTS) if m not in honest[:2]}  # fmt: skip
    liar = max(drawn, key=lambda m: len(drawn[m]))  # the liar: the other verifier drawn most often
    lies = drawn[liar]
    assert len(lies) > slots + 4
    for s, t in lies:  # the liar's tallies fill the table, then replace each other
        report(chain, run, members[liar], s, t)
    table = tallies(chain, run)
    assert len(table) == slots
    assert [t for t in table if t["opener"] != liar] == [
        {"step": target[0], "trainer": target[1], "reporters": 1, "opener": honest[0]}]  # fmt: skip
    assert all(
        c["state"] == "Healthy" for c in chain.state(run)["clients"][:CLIENTS]
    )  # a minority each
    events = report(chain, run, members[honest[1]], *target)
    assert [name for name, _ in events] == ["CheckFailed", "ClientConvicted"]


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
