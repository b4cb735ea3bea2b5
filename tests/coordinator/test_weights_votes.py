"""Weights votes on chain: from Cooldown until the next epoch starts, each healthy finisher of the epoch
reports the manifest hash of its epoch-end checkpoint (vote_weights); the hash a strict majority of the
healthy finishers reported becomes model.checkpoint.{weights_sha256, step}, the weights joiners load. A
minority cannot set it, nor can the designated checkpointers, who only move its repo."""

from __future__ import annotations

import hashlib

import pytest
from solders.pubkey import Pubkey
from support.coordinator_chain import make_config, open_run, play_round, start_epoch

CLIENTS = 4
CONFIG = make_config(CLIENTS, epoch_time=40)  # witness_nodes 3, min_clients 2


def manifest(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


@pytest.fixture
def finished(chain, core):
    """(authority, run, members) in Cooldown after an epoch that members 0..2 finished healthy; member 3
    left mid-epoch."""
    authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    play_round(chain, core, run, members)
    vote = {"index": 0, "step": chain.state(run)["progress"]["step"], "manifest": manifest("early")}
    assert chain.fails("vote_weights", members[0], run, vote) == "VoteClosed"  # not while training
    chain.call("exit_run", members[3], run)
    while chain.state(run)["run_state"] == "RoundTrain":
        play_round(chain, core, run, members, all_elected=False)
    assert chain.state(run)["run_state"] == "Cooldown"
    return authority, run, members


def vote(chain, run, members, index: int, name: str, **fields):
    args = {
        "index": index,
        "step": chain.state(run)["progress"]["step"],
        "manifest": manifest(name),
    } | fields
    return chain.call("vote_weights", members[index], run, args)


def checkpoint(chain, run) -> dict:
    return chain.state(run)["model"]["checkpoint"]


def test_a_majority_of_the_healthy_finishers_sets_the_weights(chain, finished):
    _, run, members = finished
    step = chain.state(run)["progress"]["step"]
    before = checkpoint(chain, run)
    vote(chain, run, members, 0, "a")
    vote(chain, run, members, 1, "b")
    assert checkpoint(chain, run) == before  # one each of three healthy finishers: no majority
    state = chain.state(run)
    assert state["clients"][0]["weights_vote"] == manifest("a")
    # the member that left is no finisher: its vote is refused, and it does not count
    assert chain.fails("vote_weights", members[3], run, {"index": 3, "step": step,
                                                         "manifest": manifest("a")}) == "NotInEpoch"  # fmt: skip
    result = vote(chain, run, members, 2, "a")
    after = checkpoint(chain, run)
    assert after["weights_sha256"] == manifest("a") and after["step"] == step
    assert after["repo"] == before["repo"] and after["kind"] == before["kind"]
    assert chain.idl.events_in_logs(list(result.logs()), chain.program_id) == [
        ("CheckpointUpdated", {"run": run, "checkpoint": after})
    ]
    # a vote joining the majority changes nothing more (no event); the same vote again is refused
    result = vote(chain, run, members, 1, "a")
    assert chain.idl.events_in_logs(list(result.logs()), chain.program_id) == []
    assert (
        chain.fails(
            "vote_weights", members[1], run, {"index": 1, "step": step, "manifest": manifest("a")}
        )
        == "NoChange"
    )


def test_a_vote_must_be_a_finishers_own_for_the_last_step(chain, finished):
    _, run, members = finished
    step = chain.state(run)["progress"]["step"]
    good = {"index": 0, "step": step, "manifest": manifest("a")}
    assert chain.fails("vote_weights", members[0], run, good | {"step": step - 1}) == "WrongStep"
    assert (
        chain.fails("vote_weights", members[0], run, good | {"manifest": bytes(32)})
        == "InvalidCheckpoint"
    )
    assert chain.fails("vote_weights", members[0], run, good | {"_pad": 1}) == "NonCanonical"
    assert chain.fails("vote_weights", members[1], run, good) == "NotInEpoch"  # another's index
    assert chain.fails("vote_weights", chain.wallet(), run, good) == "NotInEpoch"
    assert chain.fails("vote_weights", members[0], run, good | {"index": CLIENTS}) == "NotInEpoch"


def test_a_minority_cannot_set_the_weights(chain, core):
    """Four healthy finishers: two votes for one hash are half, not a majority; a third makes it."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    while chain.state(run)["run_state"] == "RoundTrain":
        play_round(chain, core, run, members)
    before = checkpoint(chain, run)
    vote(chain, run, members, 0, "outlier")
    vote(chain, run, members, 1, "a")
    vote(chain, run, members, 2, "a")
    assert checkpoint(chain, run) == before
    vote(chain, run, members, 3, "a")
    assert checkpoint(chain, run)["weights_sha256"] == manifest("a")


def test_votes_are_taken_until_the_next_epoch_starts(chain, finished):
    _, run, members = finished
    chain.advance(CONFIG["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "WaitingForMembers"
    vote(chain, run, members, 0, "a")
    vote(chain, run, members, 1, "a")  # still a finisher of the epoch that ended
    assert checkpoint(chain, run)["weights_sha256"] == manifest("a")
    for wallet in members:
        chain.join(wallet, run)
    chain.advance(CONFIG["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Warmup"
    args = {"index": 2, "step": chain.state(run)["progress"]["step"], "manifest": manifest("b")}
    assert chain.fails("vote_weights", members[2], run, args) == "VoteClosed"


def test_checkpointers_cannot_change_the_voted_weights(chain, finished):
    authority, run, members = finished
    vote(chain, run, members, 0, "a")
    vote(chain, run, members, 1, "a")
    voted = checkpoint(chain, run)
    keeper = chain.wallet()
    chain.call(
        "set_checkpointers",
        authority,
        run,
        {"checkpointers": [keeper.pubkey()] + [Pubkey.default()] * 7},
    )
    pointer = {"kind": "Hub", "step": 999, "repo": b"mallory/other-weights", "revision": b"v2",
               "weights_sha256": manifest("mallory")}  # fmt: skip
    chain.call("checkpoint", keeper, run, {"checkpoint": pointer})
    after = checkpoint(chain, run)
    assert after["repo"].rstrip(b"\0") == b"mallory/other-weights"
    assert after["weights_sha256"] == voted["weights_sha256"] == manifest("a")
    assert after["step"] == voted["step"]
