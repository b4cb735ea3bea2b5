"""Health checks on chain: a healthy member reports clients that the previous round's witnesses did not
see (fewer than a quorum of the configured witnesses list them in their participant bitmaps); the
report is all-or-nothing, needs round height >= 2, and the dropped clients stop training next round."""

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


def check(*indices: int) -> dict:
    return {"count": len(indices), "indices": [*indices, *[0] * (32 - len(indices))]}


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

    meta = chain.call("health_check", members[0], run, check(5))
    assert chain.idl.events_in_logs(list(meta.logs())) == [
        ("ClientDropped", {"run": run, "signer": members[5].pubkey(), "index": 5, "_pad": bytes(6)})
    ]
    after = chain.state(run)
    assert after["nonce"] == nonce + 1
    clients = after["epoch"]["clients"]
    assert clients[5]["state"] == "Dropped" and clients[5]["exited_height"] == 2
    assert [c["state"] for c in clients[:5]] == ["Healthy"] * 5
    # only the client changed: everything else of the run is as it was
    state["nonce"], state["epoch"]["clients"][5] = after["nonce"], clients[5]
    assert after == state

    # the dropped client no longer acts as a member, and cannot be dropped twice
    assert chain.fails("health_check", members[5], run, check(4)) == "NotInEpoch"
    assert chain.fails("health_check", members[0], run, check(5)) == "InvalidHealthCheck"

    # the current round still lists it (it started training); the next one does not
    round_ = after["epoch"]["rounds"][after["epoch"]["rounds_head"]]
    assert round_["active_mask"] == bitmap(EVERYONE) and round_["active_count"] == CLIENTS
    play_round(chain, core, run, members, all_elected=False)
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    round_ = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    assert round_["height"] == 3
    assert round_["active_mask"] == but(5) and round_["active_count"] == CLIENTS - 1
    assert 5 not in elected(chain, core, run)


def test_health_check_is_all_or_nothing(chain, core, epoch):
    run, members = epoch
    play_round(chain, core, run, members)
    play_round(chain, core, run, members, participants=but(4, 5))
    # 3 was seen: the whole report fails and nobody is dropped
    assert chain.fails("health_check", members[0], run, check(4, 3, 5)) == "InvalidHealthCheck"
    meta = chain.call("health_check", members[0], run, check(4, 5))
    dropped = [
        e for name, e in chain.idl.events_in_logs(list(meta.logs())) if name == "ClientDropped"
    ]
    assert [e["index"] for e in dropped] == [4, 5]
    states = [c["state"] for c in chain.state(run)["epoch"]["clients"][:CLIENTS]]
    assert states == ["Healthy"] * 4 + ["Dropped"] * 2


def test_health_check_counts_against_the_configured_quorum(chain, core, epoch):
    """Client 4 is listed by two of the three witnesses (the quorum), client 5 by one."""
    run, members = epoch
    play_round(chain, core, run, members)
    step = chain.state(run)["progress"]["step"]
    views = [ALL_PARTICIPANTS, but(5), but(4, 5)]
    witnesses = sorted(elected(chain, core, run).items(), key=lambda item: item[1])
    assert len(witnesses) == 3
    for (index, position), seen in zip(witnesses, views, strict=True):
        chain.call("witness", members[index], run, make_witness(index, position, step, seen))
    # the last witness ended the round: its inputs are frozen until the next slot starts the next one
    assert chain.fails("health_check", members[0], run, check(5)) == "SeedPending"
    start_pending_round(chain, run, members[0])
    assert chain.fails("health_check", members[0], run, check(4)) == "InvalidHealthCheck"
    chain.call("health_check", members[0], run, check(5))
    assert chain.state(run)["epoch"]["clients"][5]["state"] == "Dropped"


def test_health_check_only_from_round_height_two(chain, core, epoch):
    run, members = epoch
    # height 0: no round has been witnessed yet
    assert chain.fails("health_check", members[0], run, check(5)) == "InvalidRunState"
    play_round(chain, core, run, members, participants=but(5))
    # height 1: round 0's witnesses saw round -1, which does not exist
    assert chain.fails("health_check", members[0], run, check(5)) == "InvalidRunState"
    play_round(chain, core, run, members)
    # height 2: round 1's witnesses saw everyone who trained in round 0
    assert chain.fails("health_check", members[0], run, check(5)) == "InvalidHealthCheck"


def test_health_check_needs_a_valid_report_from_a_healthy_member(chain, core, epoch):
    run, members = epoch
    play_round(chain, core, run, members)
    play_round(chain, core, run, members, participants=but(5))
    outsider = chain.wallet()
    assert chain.fails("health_check", outsider, run, check(5)) == "NotInEpoch"
    chain.call("exit_run", members[1], run)
    assert chain.fails("health_check", members[1], run, check(5)) == "NotInEpoch"
    for bad in (check(), check(5, 5), check(CLIENTS), {"count": 33, "indices": [5] * 32}):
        assert chain.fails("health_check", members[0], run, bad) == "InvalidHealthCheck"
    # a withdrawn client is no longer healthy: there is nothing to drop
    assert chain.fails("health_check", members[0], run, check(1)) == "InvalidHealthCheck"


def test_health_check_outside_training_rounds(chain, core):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    assert chain.fails("health_check", members[0], run, check(5)) == "InvalidRunState"
    begin_warmup(chain, run, members, CONFIG)
    assert chain.fails("health_check", members[0], run, check(5)) == "InvalidRunState"


def test_drops_below_min_clients_end_the_epoch(chain, core, epoch):
    run, members = epoch
    play_round(chain, core, run, members)
    play_round(chain, core, run, members, participants=but(3, 4, 5))
    chain.call("health_check", members[0], run, check(3, 4, 5))
    assert chain.state(run)["run_state"] == "RoundTrain"
    play_round(chain, core, run, members, all_elected=False)  # 3 healthy = min_clients: goes on
    assert chain.state(run)["run_state"] == "RoundTrain"
    play_round(chain, core, run, members, participants=but(2, 3, 4, 5), all_elected=False)
    chain.call("health_check", members[0], run, check(2))
    play_round(chain, core, run, members, all_elected=False)
    assert chain.state(run)["run_state"] == "Cooldown"
