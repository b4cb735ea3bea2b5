"""A run's whole life on chain: joins, warmup, rounds with seated witnesses, epoch timeout with one flush
round, cooldown, the next epoch, and Finished at total_steps — with 8 and with 32 wallets."""

from __future__ import annotations

import pytest
from support.coordinator_chain import (
    elected,
    make_config,
    make_model,
    make_witness,
    open_run,
    play_round,
    start_epoch,
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

    # the epoch timer runs out: the next round end sets last_step = step + 1 (the round of step is a flush:
    # it trains nothing and only attests the last trained step)
    chain.advance(config["epoch_time"])
    chain.advance(config["max_round_train_time"])
    chain.call("tick", members[0], run)  # RoundTrain timed out -> RoundWitness
    assert chain.state(run)["run_state"] == "RoundWitness"
    # nobody witnessed yet: witnesses may still come in RoundWitness
    step = chain.state(run)["progress"]["step"]
    for index, wallet in enumerate(members):
        args = witness_args(chain, core, run, index, step)
        if args and chain.state(run)["progress"]["step"] == step:
            chain.call("witness", wallet, run, args)
    # a strict majority of seats agreeing decided the step, ended the round and (from a later slot than the
    # round began in) started the next
    state = chain.state(run)
    assert state["progress"]["step"] == step + 1 and state["run_state"] == "RoundTrain"
    assert state["epoch"]["last_step"] == state["progress"]["step"] + 1
    play_round(chain, core, run, members)
    state = chain.state(run)
    assert state["run_state"] == "Cooldown"
    last_round = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    rounds_in_epoch = last_round["height"] + 1
    assert rounds_in_epoch == 5

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
    # a point per delivered round per quarter of the median's share: nobody declared a throughput, so all
    # hold the median's; every round but the first (it attests the step before the epoch) decided a set
    # that names everyone
    median_share = chain.idl.constants["MEDIAN_SHARE"]
    assert state["epoch"]["decided_rounds"] == rounds_in_epoch - 1
    assert {entry["earned"] for entry in state["registry"][:clients]} == {
        (rounds_in_epoch - 1) * median_share
    }

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


def test_one_flush_round_before_total_steps(chain, core):
    """A step trains in its round and is attested in the next. With total_steps = 4 the round of step 3
    trains nothing: it only attests step 2 (last_step = 4 is set when step 2's round ends), and then the
    epoch cools down at step 4 and the run finishes."""
    config = make_config(3, total_steps=4)
    _, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(3)]
    start_epoch(chain, run, members, config)
    play_round(chain, core, run, members)
    assert chain.state(run)["epoch"]["last_step"] == 0
    play_round(chain, core, run, members)
    state = chain.state(run)
    assert state["epoch"]["last_step"] == 4 and state["progress"]["step"] == 3
    assert state["run_state"] == "RoundTrain"  # the flush round
    step = state["progress"]["step"]
    decided = []
    for index, position in list(elected(chain, core, run).items())[:2]:
        result = chain.call("witness", members[index], run, make_witness(index, position, step))
        decided += [e for name, e in chain.idl.events_in_logs(list(result.logs()), chain.program_id)
                    if name == "StepDecided"]  # fmt: skip
    assert [e["step"] for e in decided] == [2]  # the last trained step
    state = chain.state(run)
    assert state["run_state"] == "Cooldown" and state["progress"]["step"] == config["total_steps"]
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Finished"
