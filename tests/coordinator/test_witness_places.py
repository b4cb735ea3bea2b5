"""An elected witness that stops being healthy mid-round (dropped by a health check, or gone with
exit_run) hands its place down the round's shuffle: positions up to witness_nodes + (trainers no longer
healthy) may witness, so the quorum stays reachable. Before, its place was simply lost: with two
witnesses and a quorum of two, one dropped witness ended the epoch."""

from __future__ import annotations

from support.coordinator_chain import (
    bitmap,
    elected,
    make_config,
    make_witness,
    open_run,
    play_round,
    start_epoch,
)

CLIENTS = 6
CONFIG = make_config(CLIENTS, witness_nodes=2, min_clients=2)  # quorum 2 of 2


def positions(chain, core, run) -> dict[int, int]:
    """Epoch index -> witness position of every trainer this round."""
    round_ = core.round_bytes(chain.run_bytes(run)[8:])
    found = {i: core.witness_position(round_, i) for i in range(CLIENTS)}
    return {i: p for i, p in found.items() if p is not None}


def finish_round(chain, core, run, members, witnesses) -> str:
    step = chain.state(run)["progress"]["step"]
    by_position = positions(chain, core, run)
    for index in witnesses:
        chain.call("witness", members[index], run, make_witness(index, by_position[index], step))
    if chain.state(run)["run_state"] == "RoundTrain":
        chain.advance(CONFIG["max_round_train_time"])
        chain.call("tick", members[witnesses[0]], run)
    chain.advance(CONFIG["round_witness_time"])
    chain.call("tick", members[witnesses[0]], run)
    if chain.state(run)["seed_pending"]:
        chain.next_slot()
        chain.call("tick", members[witnesses[0]], run)
    return chain.state(run)["run_state"]


def test_a_witness_that_exits_mid_round_hands_its_place_on(chain, core):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    order = sorted(positions(chain, core, run), key=positions(chain, core, run).get)
    gone, kept, standby = order[0], order[1], order[2]
    chain.call("exit_run", members[gone], run)
    assert set(elected(chain, core, run)) == {gone, kept, standby}
    assert core.witness_slots(chain.run_bytes(run)[8:]) == 3
    outsider = order[3]  # position 3 is still not a witness
    step = chain.state(run)["progress"]["step"]
    late = make_witness(outsider, 3, step)
    assert chain.fails("witness", members[outsider], run, late) == "InvalidWitness"
    assert finish_round(chain, core, run, members, [kept, standby]) == "RoundTrain"


def test_a_witness_dropped_by_a_health_check_hands_its_place_on(chain, core):
    """Find a client that, left out of round 1's bitmaps, is elected in round 2; drop it there."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    play_round(chain, core, run, members)  # height 0
    snapshot = chain.snapshot(run)
    for unseen in range(CLIENTS):
        chain.restore(run, snapshot)
        play_round(chain, core, run, members, participants=bitmap(i for i in range(CLIENTS) if i != unseen))
        order = sorted(positions(chain, core, run), key=positions(chain, core, run).get)
        if unseen in order[:2]:
            break
    else:
        raise AssertionError("no client left out of round 1 is elected in round 2")
    check = {"count": 1, "indices": [unseen] + [0] * 31}
    chain.call("health_check", members[kept_of(order, unseen)], run, check)
    assert chain.state(run)["epoch"]["clients"][unseen]["state"] == "Dropped"
    witnesses = [i for i in order[:3] if i != unseen]
    assert finish_round(chain, core, run, members, witnesses) == "RoundTrain"


def kept_of(order: list[int], unseen: int) -> int:
    return next(i for i in order if i != unseen)
