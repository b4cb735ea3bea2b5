"""A run's whole life on chain: joins, warmup, rounds with elected witnesses, epoch timeout with two flush
rounds, cooldown, the next epoch, and Finished at total_steps — with 8 and with 32 wallets."""

from __future__ import annotations

import pytest
from support.coordinator_chain import (
    make_config,
    make_model,
    play_round,
    start_epoch,
    start_pending_round,
    witness_args,
)


@pytest.mark.parametrize("clients", [8, 32])
def test_full_lifecycle(chain, core, clients):
    authority = chain.wallet()
    run = chain.create_run(authority)
    config = make_config(clients, epoch_time=120, total_steps=14)
    chain.open_run(authority, run, config, make_model())
    assert chain.state(run)["run_state"] == "WaitingForMembers"
    members = [chain.wallet() for _ in range(clients)]

    # epoch 0: warmup ends early on warmup witnesses, then rounds until the epoch times out
    start_epoch(chain, run, members, config)
    state = chain.state(run)
    assert state["progress"] == {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
    first_round = state["epoch"]["rounds"][0]
    assert (
        first_round["active_count"] == clients
        and first_round["batch_size"] == config["global_batch_size_end"]
    )
    for _ in range(3):
        play_round(chain, core, run, members)
    state = chain.state(run)
    assert state["progress"]["step"] == 4 and state["run_state"] == "RoundTrain"
    assert state["epoch"]["last_step"] == 0

    # the epoch timer runs out: the next round end sets last_step = step + 2 (two flush rounds)
    chain.advance(config["epoch_time"])
    chain.advance(config["max_round_train_time"])
    chain.call("tick", members[0], run)  # RoundTrain timed out -> RoundWitness
    assert chain.state(run)["run_state"] == "RoundWitness"
    # nobody witnessed yet: witnesses may still come in RoundWitness
    step = chain.state(run)["progress"]["step"]
    for index, wallet in enumerate(members):
        args = witness_args(chain, core, run, index, step)
        if args:
            chain.call("witness", wallet, run, args)
    # the last elected witness ended the round: the next one starts a slot later
    assert start_pending_round(chain, run, members[0])
    state = chain.state(run)
    assert state["epoch"]["last_step"] == state["progress"]["step"] + 2
    play_round(chain, core, run, members)
    play_round(chain, core, run, members)
    state = chain.state(run)
    assert state["run_state"] == "Cooldown"
    last_round = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    rounds_in_epoch = last_round["height"] + 1
    assert rounds_in_epoch == 6

    # cooldown ends: next epoch waits for members; points for healthy finishers; Hub checkpoint -> P2P
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "WaitingForMembers"
    assert state["progress"]["epoch"] == 1
    assert (
        state["progress"]["epoch_start_data_index"]
        == last_round["data_index"] + last_round["batch_size"]
    )
    assert state["model"]["checkpoint"]["kind"] == "P2P"
    assert {entry["earned"] for entry in state["registry"][:clients]} == {rounds_in_epoch}

    # epoch 1: everyone must join again; runs until total_steps
    start_epoch(chain, run, members, config)
    while chain.state(run)["run_state"] == "RoundTrain":
        play_round(chain, core, run, members)
    state = chain.state(run)
    assert state["run_state"] == "Cooldown" and state["progress"]["step"] == config["total_steps"]
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Finished"
    assert chain.join_fails(members[0], run) == "Finished"


def test_every_change_bumps_the_nonce_and_nothing_else_fails_silently(chain, core):
    authority = chain.wallet()
    run = chain.create_run(authority)
    nonce = chain.state(run)["nonce"]
    chain.open_run(authority, run, make_config(2))
    assert chain.state(run)["nonce"] == nonce + 3
    wallet = chain.wallet()
    assert chain.fails("tick", wallet, run) == "NothingToTick"
    chain.join(wallet, run)
    assert chain.state(run)["nonce"] == nonce + 4
