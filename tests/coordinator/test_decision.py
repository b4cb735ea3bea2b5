"""How a step is decided, on chain: the first results root that a strict majority of the seats
(witness_nodes / 2 + 1) holds is the step's applied set (Round.decided, decided_root, decided_votes,
StepDecided) and ends the round in that instruction, which also starts the next round when it runs in a
later slot than the round began in (else a tick from a later slot does); nothing less decides. Until then a witness may
replace its own record, so witnesses that saw different results converge. Without a decision the round
runs out its time and nothing is decided. The weights digest a strict majority reports is tracked too."""

from __future__ import annotations

import hashlib

from support.coordinator_chain import (
    elected,
    make_config,
    make_witness,
    open_run,
    play_round,
    start_epoch,
    start_pending_round,
)

CLIENTS = 6


def root(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def current_round(state) -> dict:
    return state["epoch"]["rounds"][state["epoch"]["rounds_head"]]


def previous_round(state) -> dict:
    rounds = state["epoch"]["rounds"]
    return rounds[(state["epoch"]["rounds_head"] - 1) % len(rounds)]


def epoch(chain, core, **config):
    config = make_config(CLIENTS, **config)
    _, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, config)
    play_round(chain, core, run, members)  # height 1: its witnesses attest step 1
    return run, members, config, list(elected(chain, core, run).items())


def send(chain, run, members, seat, name: str, digest: int = 7):
    index, position = seat
    step = chain.state(run)["progress"]["step"]
    witness = make_witness(index, position, step, root=root(name), digest=digest)
    return chain.call("witness", members[index], run, witness)


def events(chain, result) -> list[tuple[str, dict]]:
    return chain.idl.events_in_logs(list(result.logs()), chain.program_id)


def test_a_strict_majority_of_the_seats_decides_and_ends_the_round(chain, core):
    """Five seats: two records behind one root decide nothing, the third does — in its own instruction,
    which passes RoundWitness; in the slot the round began in, the next round waits for a tick from a
    later slot."""
    run, members, _, seats = epoch(chain, core, witness_nodes=5, min_clients=3)
    assert len(seats) == 5 and core.quorum(5) == 3
    step = chain.state(run)["progress"]["step"]
    send(chain, run, members, seats[0], "applied")
    send(chain, run, members, seats[1], "other")
    send(chain, run, members, seats[2], "applied")
    state = chain.state(run)
    assert not current_round(state)["decided"] and state["run_state"] == "RoundTrain"
    result = send(chain, run, members, seats[3], "applied")
    state = chain.state(run)
    round_ = current_round(state)
    assert (
        round_["decided"]
        and round_["decided_root"] == root("applied")
        and round_["decided_votes"] == 3
    )
    assert (
        state["run_state"] == "RoundWitness"
        and state["seed_pending"]
        and state["seed_slot"] == chain.slot
    )
    assert state["progress"]["step"] == step + 1
    names = [name for name, _ in events(chain, result)]
    assert names == ["WitnessSubmitted", "StepDecided", "RunStateChanged"]
    decided = dict(events(chain, result))["StepDecided"]
    assert decided == {
        "run": run,
        "step": step - 1,
        "votes": 3,
        "_pad": 0,
        "results_root": root("applied"),
    }
    # the round is over: the fifth seat is too late
    index, position = seats[4]
    late = make_witness(index, position, step, root=root("applied"))
    assert chain.fails("witness", members[index], run, late) == "SeedPending"
    start_pending_round(chain, run, members[0])
    assert chain.fails("witness", members[index], run, late) == "WrongStep"


def test_a_decision_from_a_later_slot_starts_the_next_round_in_its_own_instruction(chain, core):
    """No transaction between two rounds: the deciding witness (a slot after the round began, as on a
    real chain) ends the round and starts the next, whose seed and trainers were known a round ahead."""
    run, members, _, seats = epoch(chain, core)
    before = chain.state(run)
    step = before["progress"]["step"]
    send(chain, run, members, seats[0], "applied")
    chain.next_slot()
    result = send(chain, run, members, seats[1], "applied")
    state = chain.state(run)
    assert previous_round(state)["decided"] and previous_round(state)["decided_root"] == root(
        "applied"
    )
    assert state["run_state"] == "RoundTrain" and not state["seed_pending"]
    assert state["progress"]["step"] == step + 1 and state["seed_slot"] == chain.slot
    assert current_round(state)["random_seed"] == before["next_seed"]
    assert current_round(state)["active_mask"] == before["next_mask"]
    names = [name for name, _ in events(chain, result)]
    assert names == ["WitnessSubmitted", "StepDecided", "RunStateChanged", "RunStateChanged"]
    index, position = seats[2]
    late = make_witness(index, position, step, root=root("applied"))
    assert chain.fails("witness", members[index], run, late) == "WrongStep"


def test_half_of_the_seats_is_not_a_majority(chain, core):
    """Four seats, two roots with two records each: no decision, however long the round lasts."""
    run, members, config, seats = epoch(chain, core, witness_nodes=4, min_clients=3)
    assert core.quorum(4) == 3
    for seat, name in zip(seats, ["a", "a", "b", "b"], strict=True):
        send(chain, run, members, seat, name)
    state = chain.state(run)
    assert not current_round(state)["decided"] and not state["seed_pending"]
    assert current_round(state)["witnesses_len"] == 4
    chain.advance(config["max_round_train_time"])
    chain.call("tick", members[0], run)
    step = chain.state(run)["progress"]["step"]
    chain.advance(config["round_witness_time"])
    chain.call("tick", members[0], run)  # ends the round and starts the next (a later slot)
    state = chain.state(run)
    assert state["progress"]["step"] == step + 1 and state["run_state"] == "RoundTrain"
    assert not previous_round(state)["decided"]


def test_records_are_replaced_until_the_witnesses_converge(chain, core):
    """Seat 0 missed a result and reports root "partial"; seat 1 reports "full". Seat 0 then receives the
    result and replaces its record: the two agree, which decides. A replacement keeps the record's place
    (at most witness_nodes records) and chains into the witness digest; resending a record is refused."""
    run, members, _, seats = epoch(chain, core)
    send(chain, run, members, seats[0], "partial")
    assert chain.fails("witness", members[seats[0][0]], run, make_witness(
        *seats[0], chain.state(run)["progress"]["step"], root=root("partial"))) == "DuplicateWitness"  # fmt: skip
    send(chain, run, members, seats[1], "full")
    before = current_round(chain.state(run))
    assert before["witnesses_len"] == 2 and not before["decided"]
    result = send(chain, run, members, seats[0], "full")
    assert [name for name, _ in events(chain, result)][:2] == ["WitnessSubmitted", "StepDecided"]
    state = chain.state(run)
    round_ = current_round(state)
    assert (
        round_["decided"]
        and round_["decided_root"] == root("full")
        and round_["decided_votes"] == 2
    )
    assert round_["witnesses_len"] == 2  # the first seat's record was replaced, not added
    head = state["epoch"]["rounds_head"]
    records = state["witnesses"][head]["records"][:2]
    assert [(r["index"], r["results_root"]) for r in records] == [(seats[0][0], root("full")),
                                                                   (seats[1][0], root("full"))]  # fmt: skip
    assert [c["dissents"] for c in state["clients"][:CLIENTS]] == [0] * CLIENTS  # nobody lost


def test_without_a_decision_the_round_times_out_and_nothing_is_decided(chain, core):
    """Three seats, three roots: the round waits out its training time and its witness time; the step is
    not decided, no StepDecided is logged, no dissent is counted, and a witness after the time is
    refused. Enough seats reported (the quorum), so the epoch goes on."""
    run, members, config, seats = epoch(chain, core)
    for seat, name in zip(seats, ["a", "b", "c"], strict=True):
        send(chain, run, members, seat, name)
    assert chain.fails("tick", members[0], run) == "NothingToTick"
    chain.advance(config["max_round_train_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "RoundWitness"
    chain.advance(config["round_witness_time"])
    index, position = seats[0]
    late = make_witness(index, position, chain.state(run)["progress"]["step"], root=root("b"))
    assert chain.fails("witness", members[index], run, late) == "RoundOver"
    result = chain.call("tick", members[0], run)
    assert "StepDecided" not in [name for name, _ in events(chain, result)]
    state = chain.state(run)
    round_ = previous_round(state)
    assert (
        state["run_state"] == "RoundTrain"
        and not round_["decided"]
        and round_["decided_votes"] == 0
    )
    assert round_["decided_root"] == bytes(32)
    assert [c["dissents"] for c in state["clients"][:CLIENTS]] == [0] * CLIENTS


def test_the_weights_digest_of_a_majority_is_tracked_on_every_record(chain, core):
    """Replicas compare weights digests: the round shows the one a strict majority of seats reported
    (digest_votes), recomputed on every record, replacements included."""
    run, members, _, seats = epoch(chain, core)

    def digest() -> tuple[int, int]:
        round_ = current_round(chain.state(run))
        return round_["weights_digest"], round_["digest_votes"]

    send(chain, run, members, seats[0], "a", digest=11)
    assert digest() == (0, 0)
    send(chain, run, members, seats[1], "b", digest=11)
    assert digest() == (11, 2)
    send(chain, run, members, seats[0], "a", digest=12)  # its replacement changes its digest
    assert digest() == (0, 0)
    send(chain, run, members, seats[2], "c", digest=12)
    assert digest() == (12, 2)


def test_each_rounds_outcome_outlives_the_round_ring_for_the_decision_window(chain, core):
    """Every ended round leaves its outcome in EpochState.decisions (step s at s % DECISION_WINDOW): the
    decided root, or undecided. A client whose view jumped past the NUM_ROUNDS ring reads them there."""
    window, ring = core.idl.constants["DECISION_WINDOW"], core.idl.constants["NUM_ROUNDS"]
    run, members, config, seats = epoch(chain, core)
    first = chain.state(run)["progress"]["step"] - 1  # the step the running round attests
    for seat, name in zip(seats, ["a", "b", "c"], strict=True):  # this round ends undecided
        send(chain, run, members, seat, name)
    chain.advance(config["max_round_train_time"])
    chain.call("tick", members[0], run)
    chain.advance(config["round_witness_time"])
    chain.call("tick", members[0], run)
    outcomes = {first: None}
    while len(outcomes) < window:
        step = chain.state(run)["progress"]["step"]
        for seat in list(elected(chain, core, run).items())[: core.quorum(config["witness_nodes"])]:
            send(chain, run, members, seat, f"step {step - 1}")
        outcomes[step - 1] = root(f"step {step - 1}")
        chain.next_slot()
        if chain.state(run)["seed_pending"]:
            chain.call("tick", members[0], run)
    state = chain.state(run)
    newest = state["progress"]["step"]
    assert newest - 1 - first > ring  # the round ring no longer holds the first rounds
    kept = {d["step"]: (d["root"] if d["outcome"] == 1 else None) for d in state["epoch"]["decisions"]
            if d["outcome"] in (1, 2)}  # fmt: skip
    assert kept == outcomes and kept[first] is None  # the undecided round too
    assert [d["step"] % window for d in state["epoch"]["decisions"]] == list(range(window))
