"""Witness seats on chain. The round's witness order is a Fisher-Yates shuffle (Psyche's LCG) of its
trainers keyed by sha256(seed_le || "witness"); the seats are the first witness_nodes positions, in order,
whose client was healthy when the round started (and is no persistent dissenter). The seats are fixed for
the round: a holder lost during it (exited, dropped, convicted) leaves its seat empty, nobody takes it, and
an exit opens no seat. A witness whose root lost DISSENT_LIMIT decisions gets no more seats."""

from __future__ import annotations

from support.coordinator_chain import (
    bitmap,
    elected,
    make_config,
    make_witness,
    open_run,
    play_round,
    start_epoch,
    start_pending_round,
    witness_order,
)

CLIENTS = 6
CONFIG = make_config(CLIENTS)  # witness_nodes 3 (quorum 2), min_clients 3


def current_round(state) -> dict:
    return state["epoch"]["rounds"][state["epoch"]["rounds_head"]]


def order_now(chain, run) -> list[int]:
    round_ = current_round(chain.state(run))
    return witness_order(round_["random_seed"], round_["active_mask"])


def epoch(chain, config=CONFIG, clients=CLIENTS):
    _, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(clients)]
    start_epoch(chain, run, members, config)
    return run, members


def witness(chain, run, members, index, position, **fields) -> None:
    step = chain.state(run)["progress"]["step"]
    chain.call("witness", members[index], run, make_witness(index, position, step, **fields))


def refused(chain, run, members, index, position) -> str:
    step = chain.state(run)["progress"]["step"]
    return chain.fails("witness", members[index], run, make_witness(index, position, step))


def test_every_trainer_is_equally_likely_in_every_position():
    """The shuffle draws each index from the LCG state's high bits; with the low bits (Psyche's `state % i`)
    four trainers got the first seat 34% / 34% / 24% / 8.6% of the time. Over 8,000 seeds every trainer holds
    each of the four positions 25% ± 2% of the time (the 99.99% band of a fair shuffle is about ± 1.8%)."""
    seeds, trainers = 8000, 4
    counts = [[0] * trainers for _ in range(trainers)]
    for seed in range(seeds):
        for position, index in enumerate(
            witness_order(seed * 0x9E3779B97F4A7C15 % 2**64, bitmap(range(trainers)))
        ):
            counts[position][index] += 1
    assert all(abs(c / seeds - 1 / trainers) < 0.02 for row in counts for c in row), counts


def test_the_seats_are_the_first_positions_of_the_shuffle(chain, core):
    """The chain's order is the LCG Fisher-Yates keyed by sha256(seed || "witness") (written out again in
    the test), the same as the host core's, and the first witness_nodes positions hold the seats."""
    run, members = epoch(chain)
    for _ in range(3):
        order = order_now(chain, run)
        data = chain.run_bytes(run)[8:]
        assert core.witness_order(core.round_bytes(data)) == order
        assert elected(chain, core, run) == {order[p]: p for p in range(CONFIG["witness_nodes"])}
        play_round(chain, core, run, members)


def test_an_unseated_client_never_witnesses_first_come(chain, core):
    """Position 3 is the first stand-in: it is refused before anyone reported, while seats disagree, and
    after a seat holder reported — at its own position or a seat's."""
    run, members = epoch(chain)
    order = order_now(chain, run)
    stand_in = order[3]
    assert refused(chain, run, members, stand_in, 3) == "InvalidWitness"
    witness(chain, run, members, order[0], 0, root=b"\x0a" * 32)
    witness(chain, run, members, order[1], 1, root=b"\x0b" * 32)  # no decision yet
    for position in (0, 1, 2, 3):
        assert refused(chain, run, members, stand_in, position) == "InvalidWitness"
    witness(chain, run, members, order[2], 2, root=b"\x0a" * 32)
    assert current_round(chain.state(run))["decided"]


def test_a_seated_witness_that_exits_leaves_its_seat_empty(chain, core):
    """Nobody takes its seat (not the next position of the order, nor whoever asks); the other two seats
    still decide."""
    run, members = epoch(chain)
    order = order_now(chain, run)
    chain.call("exit_run", members[order[0]], run)
    assert elected(chain, core, run) == {order[0]: 0, order[1]: 1, order[2]: 2}
    assert refused(chain, run, members, order[0], 0) == "InvalidWitness"
    assert refused(chain, run, members, order[3], 3) == "InvalidWitness"
    witness(chain, run, members, order[2], 2)
    witness(chain, run, members, order[1], 1)
    assert current_round(chain.state(run))["decided"]


def test_a_seated_witness_dropped_mid_round_leaves_its_seat_empty(chain, core):
    """Round 2's seats are known when round 1 starts (its seed is next_seed): round 1's witnesses leave
    out a client seated in round 2, it is dropped there, and its seat stays empty (position 3 does not get
    it: a member cannot hand its seat on by getting itself dropped)."""
    run, members = epoch(chain)
    play_round(chain, core, run, members)  # height 0
    state = chain.state(run)
    order = witness_order(state["next_seed"], state["next_mask"])  # round 2's
    unseen = order[0]
    play_round(
        chain, core, run, members, participants=bitmap(i for i in range(CLIENTS) if i != unseen)
    )
    assert order_now(chain, run) == order
    check = {
        "step": chain.state(run)["progress"]["step"] - 2,
        "count": 1,
        "indices": [unseen] + [0] * 31,
    }
    chain.call("health_check", members[order[1]], run, check)
    assert chain.state(run)["clients"][unseen]["state"] == "Dropped"
    assert elected(chain, core, run) == {order[0]: 0, order[1]: 1, order[2]: 2}
    assert refused(chain, run, members, order[3], 3) == "InvalidWitness"
    assert refused(chain, run, members, unseen, 0) == "InvalidWitness"
    witness(chain, run, members, order[2], 2)
    witness(chain, run, members, order[1], 1)
    assert current_round(chain.state(run))["decided"]


def test_exiting_a_sybil_opens_no_seat_for_an_unseated_client(chain, core):
    """The attack on the stand-in rule (seats = witness_nodes + trainers no longer healthy, first come):
    the attacker holds the first stand-in (position 3) and a sybil; the sybil's exit made position 3 a
    witness that could report before an honest seat holder and take its record. Now a seat opens only when
    a seat holder is lost before reporting: not for an unseated sybil, nor for a seated one that already
    reported (it keeps its seat: no seat ever counts twice)."""
    run, members = epoch(chain)
    order = order_now(chain, run)
    attacker, sybil = order[3], order[5]
    chain.call("exit_run", members[sybil], run)
    assert chain.state(run)["clients"][sybil]["state"] == "Withdrawn"
    assert refused(chain, run, members, attacker, 3) == "InvalidWitness"
    assert attacker not in elected(chain, core, run)

    # three rounds on (the sybil no longer trains): a seat holder reports, then exits
    for _ in range(3):
        play_round(chain, core, run, members, all_elected=False)
    order = order_now(chain, run)
    assert sybil not in order
    seats, stand_in = order[:3], order[3]
    colluder = seats[0]
    witness(chain, run, members, colluder, 0, root=b"\x0c" * 32)
    chain.call("exit_run", members[colluder], run)
    assert elected(chain, core, run) == {i: order.index(i) for i in seats}
    assert refused(chain, run, members, stand_in, 3) == "InvalidWitness"
    witness(chain, run, members, seats[1], order.index(seats[1]))
    witness(chain, run, members, seats[2], order.index(seats[2]))
    round_ = current_round(chain.state(run))
    assert round_["decided"] and round_["witnesses_len"] == 3


def test_persistent_dissenters_lose_their_seats(chain, core):
    """Three clients, three seats: client 0 reports another root than the majority in every round. Each
    lost decision counts a dissent (a seat that did not report counts none); at DISSENT_LIMIT it holds no
    seat any more, and the two others still decide (a strict majority of three)."""
    config = make_config(3)  # witness_nodes 3, min_clients 2
    run, members = epoch(chain, config, 3)
    limit = chain.idl.constants["DISSENT_LIMIT"]
    assert limit == 3
    step_root = b"\x0d" * 32
    for lost in range(1, limit + 1):
        seats = elected(chain, core, run)
        assert set(seats) == {0, 1, 2}
        nonce = chain.state(run)["epoch"]["members_nonce"]
        witness(chain, run, members, 0, seats[0], root=step_root)
        for index in (1, 2):
            witness(chain, run, members, index, seats[index])
        state = chain.state(run)
        assert [c["dissents"] for c in state["clients"][:3]] == [lost, 0, 0]
        assert state["epoch"]["members_nonce"] == nonce + 1  # followers re-read the members
        start_pending_round(chain, run, members[0])
        if lost == 1:  # a round in which client 0 does not report: no dissent for it
            seats = elected(chain, core, run)
            for index in (1, 2):
                witness(chain, run, members, index, seats[index])
            assert chain.state(run)["clients"][0]["dissents"] == 1
            start_pending_round(chain, run, members[0])
    assert set(elected(chain, core, run)) == {1, 2}
    order = order_now(chain, run)
    assert refused(chain, run, members, 0, order.index(0)) == "InvalidWitness"
    play_round(chain, core, run, members)
    assert chain.state(run)["run_state"] == "RoundTrain"
