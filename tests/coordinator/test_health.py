"""Health checks on chain: a healthy member reports trainers that a strict majority of the seats left out
of the records they submitted in the previous round (a seat that never reported counts for nobody, so one
censoring witness of three drops nobody); the report is all-or-nothing, needs round height >= 2, and a
dropped client leaves the trainers from the round after the next (the next one's were fixed when the
current one started)."""

from __future__ import annotations

import pytest
from support.coordinator_chain import (
    ALL_PARTICIPANTS,
    begin_warmup,
    bitmap,
    elected,
    make_config,
    make_witness,
    open_run,
    play_round,
    start_epoch,
    start_pending_round,
)

CLIENTS = 6
CONFIG = make_config(CLIENTS)  # min_clients 3, witness_nodes 3: quorum 2
EVERYONE = list(range(CLIENTS))


def check(chain, run, *indices: int, back: int = 2) -> dict:
    """A health check of these trainers of the round `back` rounds before the current one (the round after
    it attests them)."""
    state = chain.state(run)
    step = (
        state["epoch"]["start_step"]
        + state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["height"]
        - back
    )
    return {
        "step": max(step, 0),
        "count": len(indices),
        "indices": [*indices, *[0] * (32 - len(indices))],
    }


def but(*missing: int) -> bytes:
    return bitmap([i for i in EVERYONE if i not in missing])


@pytest.fixture
def epoch(chain):
    """A run in the first RoundTrain (height 0) of an epoch of six members."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    return run, members


def test_health_check_drops_a_client_the_witnesses_did_not_see(chain, core, epoch):
    run, members = epoch
    play_round(chain, core, run, members)  # height 0: everyone trains
    play_round(chain, core, run, members, participants=but(5))  # height 1 attests height 0
    state = chain.state(run)
    assert state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["height"] == 2
    nonce = state["nonce"]

    meta = chain.call("health_check", members[0], run, check(chain, run, 5))
    assert chain.idl.events_in_logs(list(meta.logs()), chain.program_id) == [
        ("ClientDropped", {"run": run, "signer": members[5].pubkey(), "index": 5, "_pad": bytes(6)})
    ]
    after = chain.state(run)
    assert after["nonce"] == nonce + 1
    clients = after["clients"]
    assert clients[5]["state"] == "Dropped" and clients[5]["exited_height"] == 2
    assert [c["state"] for c in clients[:5]] == ["Healthy"] * 5
    # only the client changed (and the members nonce that tells followers so): the rest is as it was
    assert after["epoch"]["members_nonce"] == state["epoch"]["members_nonce"] + 1
    state["nonce"], state["clients"][5] = after["nonce"], clients[5]
    state["epoch"]["members_nonce"] = after["epoch"]["members_nonce"]
    assert after == state

    # the dropped client no longer acts as a member, and cannot be dropped twice
    assert chain.fails("health_check", members[5], run, check(chain, run, 4)) == "NotInEpoch"
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidHealthCheck"
    )

    # the current round still lists it (it started training), and so do the next two: the next's trainers
    # were fixed when this one's predecessor started (next_mask), the one after's when this one started
    # (seed_mask, frozen before the drop); it holds no seat there, and the round after those drops it
    round_ = after["epoch"]["rounds"][after["epoch"]["rounds_head"]]
    assert round_["active_mask"] == bitmap(EVERYONE) and round_["active_count"] == CLIENTS
    assert after["next_mask"] == after["seed_mask"] == bitmap(EVERYONE)
    for height, active, following in ((3, bitmap(EVERYONE), bitmap(EVERYONE)), (4, bitmap(EVERYONE), but(5)),
                                      (5, but(5), but(5))):  # fmt: skip
        play_round(chain, core, run, members, all_elected=False)
        state = chain.state(run)
        round_ = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
        assert state["run_state"] == "RoundTrain" and round_["height"] == height
        assert round_["active_mask"] == active and state["next_mask"] == following
        assert 5 not in elected(chain, core, run)
    assert round_["active_count"] == CLIENTS - 1


def test_health_check_is_all_or_nothing(chain, core, epoch):
    run, members = epoch
    play_round(chain, core, run, members)
    play_round(chain, core, run, members, participants=but(4, 5))
    # 3 was seen: the whole report fails and nobody is dropped
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 4, 3, 5))
        == "InvalidHealthCheck"
    )
    meta = chain.call("health_check", members[0], run, check(chain, run, 4, 5))
    dropped = [
        e
        for name, e in chain.idl.events_in_logs(list(meta.logs()), chain.program_id)
        if name == "ClientDropped"
    ]
    assert [e["index"] for e in dropped] == [4, 5]
    states = [c["state"] for c in chain.state(run)["clients"][:CLIENTS]]
    assert states == ["Healthy"] * 4 + ["Dropped"] * 2


def witness_views(chain, core, run, members, views: list[bytes]) -> None:
    """The seats, in order, submit these participant bitmaps (each view its own results root); views that
    disagree decide nothing, and the round then ends by its timeouts."""
    step = chain.state(run)["progress"]["step"]
    seats = list(elected(chain, core, run).items())

    def over() -> bool:
        return chain.state(run)["seed_pending"] or chain.state(run)["progress"]["step"] != step

    for (index, position), seen in zip(seats, views, strict=False):
        if over():
            break  # a majority decided: the round is over
        chain.call("witness", members[index], run, make_witness(index, position, step, seen))
    if not over():
        chain.advance(CONFIG["max_round_train_time"])
        chain.call("tick", members[0], run)
        chain.advance(CONFIG["round_witness_time"])
        chain.call("tick", members[0], run)  # the round ends by timeout, and the next starts


def test_health_check_counts_against_the_configured_quorum(chain, core, epoch):
    """Client 4 is left out by one of the three seats, client 5 by two (the quorum)."""
    run, members = epoch
    play_round(chain, core, run, members)
    witness_views(chain, core, run, members, [ALL_PARTICIPANTS, but(5), but(4, 5)])
    state = chain.state(run)
    rounds = state["epoch"]["rounds"]
    assert not rounds[(state["epoch"]["rounds_head"] - 1) % len(rounds)]["decided"]
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 4)) == "InvalidHealthCheck"
    )
    chain.call("health_check", members[0], run, check(chain, run, 5))
    assert chain.state(run)["clients"][5]["state"] == "Dropped"


def test_one_censoring_witness_of_three_cannot_drop_an_honest_trainer(chain, core, epoch):
    """The censor reports first, leaving trainer 5 out; the two honest seats hold 5's result and decide the
    step. One record of three is no majority: 5 stays."""
    run, members = epoch
    play_round(chain, core, run, members)
    witness_views(chain, core, run, members, [but(5), ALL_PARTICIPANTS, ALL_PARTICIPANTS])
    state = chain.state(run)
    round_ = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    assert round_["decided"] and round_["witnesses_len"] == 3
    start_pending_round(chain, run, members[0])
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidHealthCheck"
    )


def test_a_seat_that_never_reported_counts_for_nobody(chain, core, epoch):
    """Two of three seats report, disagreeing (one left 5 out): no decision, and 5 is missed by one record
    only — the silent third seat does not count against it."""
    run, members = epoch
    play_round(chain, core, run, members)
    witness_views(chain, core, run, members, [but(5), ALL_PARTICIPANTS])
    start_pending_round(chain, run, members[0])
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidHealthCheck"
    )


def test_two_of_three_drop_a_trainer_that_did_not_deliver(chain, core, epoch):
    """Trainer 5 delivered nothing: two seats say so (and decide the step), the third claims it holds 5's
    result anyway. A strict majority left it out: it is dropped."""
    run, members = epoch
    play_round(chain, core, run, members)
    witness_views(chain, core, run, members, [ALL_PARTICIPANTS, but(5), but(5)])
    start_pending_round(chain, run, members[0])
    chain.call("health_check", members[0], run, check(chain, run, 5))
    assert chain.state(run)["clients"][5]["state"] == "Dropped"


def test_health_check_only_from_round_height_two(chain, core, epoch):
    run, members = epoch
    # height 0: no round has been witnessed yet (the step named is not attested by a round that is over)
    assert chain.fails("health_check", members[0], run, check(chain, run, 5)) == "WrongStep"
    play_round(chain, core, run, members, participants=but(5))
    # height 1: round 0's witnesses saw round -1, which does not exist
    assert chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidRunState"
    play_round(chain, core, run, members)
    # height 2: round 1's witnesses saw everyone who trained in round 0
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidHealthCheck"
    )
    # the current round's and the last round's trainers are not attested yet by a round that is over
    for back in (0, 1):
        assert (
            chain.fails("health_check", members[0], run, check(chain, run, 5, back=back))
            == "WrongStep"
        )


def test_a_report_reads_the_records_of_the_round_it_reports_on(chain, core, epoch):
    """Round 1's seats left 5 out; a report of round 0's trainers computed from them lands after round 3
    started (rounds can be sub-second): the chain reads round 1's records, as the report did, and drops 5.
    The same report about round 1's trainers (seen by round 2's seats) is refused."""
    run, members = epoch
    play_round(chain, core, run, members)  # height 0
    play_round(chain, core, run, members, participants=but(5))  # height 1 attests height 0
    play_round(chain, core, run, members)  # height 2 attests height 1: everyone seen
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidHealthCheck"
    )
    chain.call("health_check", members[0], run, check(chain, run, 5, back=3))
    assert chain.state(run)["clients"][5]["state"] == "Dropped"
    # a round no longer stored (the ring keeps NUM_ROUNDS) cannot be reported on
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 4, back=4))
        == "InvalidRunState"
    )


def test_a_seat_cannot_vote_the_decided_root_and_leave_one_of_its_trainers_out(chain, core, epoch):
    """Seat B missed trainer 5's result (another root, 5 left out); colluding seat C votes the root of the
    honest list that holds 5 but leaves 5 out of its bitmap; honest seat A holds everything. A's and C's
    records are not the same vote, so nothing is decided while B's and C's records leave 5 out (a root
    counted alone decided here, with two of three records leaving 5 out: 5 was dropped although its
    result was applied); B fetches 5's result and votes with A. The decided set holds 5: 5 stays."""
    run, members = epoch
    play_round(chain, core, run, members)  # height 0
    step = chain.state(run)["progress"]["step"]
    (b, b_seat), (c, c_seat), (a, a_seat) = list(elected(chain, core, run).items())
    honest, partial = b"\x0a" * 32, b"\x0b" * 32
    chain.call("witness", members[b], run, make_witness(b, b_seat, step, but(5), root=partial))
    chain.call("witness", members[c], run, make_witness(c, c_seat, step, but(5), root=honest))
    chain.call(
        "witness", members[a], run, make_witness(a, a_seat, step, ALL_PARTICIPANTS, root=honest)
    )
    state = chain.state(run)
    assert (
        state["progress"]["step"] == step and not state["seed_pending"]
    )  # not decided: the round goes on
    chain.call(
        "witness", members[b], run, make_witness(b, b_seat, step, ALL_PARTICIPANTS, root=honest)
    )
    start_pending_round(chain, run, members[0])
    state = chain.state(run)
    decided = state["epoch"]["rounds"][(state["epoch"]["rounds_head"] - 1) % 4]
    assert (
        decided["decided"] and decided["decided_root"] == honest and decided["decided_votes"] == 2
    )
    assert state["clients"][c]["dissents"] == 1
    play_round(chain, core, run, members)  # height 2: its seats' records are of height 1
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 5, back=3))
        == "InvalidHealthCheck"
    )
    assert chain.state(run)["clients"][5]["state"] == "Healthy"


def test_health_check_needs_a_valid_report_from_a_healthy_member(chain, core, epoch):
    run, members = epoch
    play_round(chain, core, run, members)
    play_round(chain, core, run, members, participants=but(5))
    outsider = chain.wallet()
    assert chain.fails("health_check", outsider, run, check(chain, run, 5)) == "NotInEpoch"
    chain.call("exit_run", members[1], run)
    assert chain.fails("health_check", members[1], run, check(chain, run, 5)) == "NotInEpoch"
    for bad in (
        check(chain, run),
        check(chain, run, 5, 5),
        check(chain, run, CLIENTS),
        {**check(chain, run, 5), "count": 33, "indices": [5] * 32},
    ):
        assert chain.fails("health_check", members[0], run, bad) == "InvalidHealthCheck"
    # a withdrawn client is no longer healthy: there is nothing to drop
    assert (
        chain.fails("health_check", members[0], run, check(chain, run, 1)) == "InvalidHealthCheck"
    )


def test_health_check_outside_training_rounds(chain, core):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    assert chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidRunState"
    begin_warmup(chain, run, members, CONFIG)
    assert chain.fails("health_check", members[0], run, check(chain, run, 5)) == "InvalidRunState"


def test_drops_below_min_clients_end_the_epoch(chain, core, epoch):
    run, members = epoch
    play_round(chain, core, run, members)
    play_round(chain, core, run, members, participants=but(3, 4, 5))
    chain.call("health_check", members[0], run, check(chain, run, 3, 4, 5))
    assert chain.state(run)["run_state"] == "RoundTrain"
    play_round(chain, core, run, members, all_elected=False)  # 3 healthy = min_clients: goes on
    assert chain.state(run)["run_state"] == "RoundTrain"
    play_round(chain, core, run, members, participants=but(2, 3, 4, 5), all_elected=False)
    chain.call("health_check", members[0], run, check(chain, run, 2))
    play_round(chain, core, run, members, all_elected=False)
    assert chain.state(run)["run_state"] == "Cooldown"
