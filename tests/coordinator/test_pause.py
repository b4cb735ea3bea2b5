"""Pause and resume on chain: a pause while training waits for the round to end (Cooldown, then Paused);
in WaitingForMembers or Warmup it is immediate; resuming re-validates the configuration, voids earlier
joins, and cancels a pause that has not taken effect yet."""

from __future__ import annotations

from solders.keypair import Keypair
from support.coordinator_chain import (
    begin_warmup,
    make_config,
    make_model,
    open_run,
    play_round,
    start_epoch,
)

CLIENTS = 4
CONFIG = make_config(CLIENTS)  # min_clients 2, witness_nodes 3 (quorum 2)


def pause(chain, authority, run, paused: bool = True):
    return chain.call("set_paused", authority, run, {"paused": paused})


def phases(chain, meta) -> list[tuple[str, str]]:
    return [
        (e["from_state"], e["to_state"])
        for name, e in chain.idl.events_in_logs(list(meta.logs()), chain.program_id)
        if name == "RunStateChanged"
    ]


def pending_joins(state) -> int:
    registry = state["registry"][: state["registry_len"]]
    return sum(entry["join_marker"] == state["next_active"] for entry in registry)


def test_pause_while_training_takes_effect_after_cooldown(chain, core):
    authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    before = chain.state(run)
    pause(chain, authority, run)
    state = chain.state(run)
    assert state["pending_pause"] and state["run_state"] == "RoundTrain"
    assert state["nonce"] == before["nonce"] + 1

    # the round ends normally, then the pending pause sends the epoch to Cooldown
    play_round(chain, core, run, members)
    state = chain.state(run)
    assert state["run_state"] == "Cooldown" and state["pending_pause"]
    assert state["progress"]["step"] == 2
    assert chain.fails("tick", members[0], run) == "NothingToTick"

    chain.advance(CONFIG["cooldown_time"])
    meta = chain.call("tick", members[0], run)
    assert phases(chain, meta) == [("Cooldown", "Paused")]
    state = chain.state(run)
    assert state["run_state"] == "Paused" and not state["pending_pause"]
    assert state["progress"]["epoch"] == 1
    assert state["epoch"]["cold_start_epoch"]
    assert {c["state"] for c in state["clients"][:CLIENTS]} == {"Withdrawn"}
    assert state["model"]["checkpoint"]["kind"] == "P2P"
    # halted: no ticks, no second pause
    assert chain.fails("tick", members[0], run) == "Halted"
    assert chain.fails("set_paused", authority, run, {"paused": True}) == "Halted"

    # joins while paused are refused (resuming would void them anyway); joining after the resume works
    assert chain.join_fails(members[0], run) == "Halted"
    meta = pause(chain, authority, run, False)
    assert phases(chain, meta) == [("Paused", "WaitingForMembers")]
    state = chain.state(run)
    assert state["run_state"] == "WaitingForMembers" and pending_joins(state) == 0
    start_epoch(chain, run, members, CONFIG)
    state = chain.state(run)
    assert state["epoch"]["cold_start_epoch"] and state["epoch"]["start_step"] == 2


def test_pause_while_waiting_for_members_is_immediate(chain):
    authority, run = open_run(chain, CONFIG)
    wallet = chain.wallet()
    chain.join(wallet, run)
    meta = pause(chain, authority, run)
    assert phases(chain, meta) == [("WaitingForMembers", "Paused")]
    state = chain.state(run)
    assert state["run_state"] == "Paused" and not state["pending_pause"]
    assert state["epoch"]["cold_start_epoch"]
    pause(chain, authority, run, False)
    state = chain.state(run)
    assert state["run_state"] == "WaitingForMembers" and pending_joins(state) == 0


def test_pause_in_warmup_is_immediate_and_withdraws_the_members(chain):
    authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    begin_warmup(chain, run, members, CONFIG)
    meta = pause(chain, authority, run)
    assert phases(chain, meta) == [("Warmup", "Paused")]
    state = chain.state(run)
    clients = state["clients"][:CLIENTS]
    assert {c["state"] for c in clients} == {"Withdrawn"} and {
        c["exited_height"] for c in clients
    } == {0}
    # resuming voids the joins of the interrupted epoch: everyone must join again
    pause(chain, authority, run, False)
    state = chain.state(run)
    assert state["run_state"] == "WaitingForMembers" and pending_joins(state) == 0
    chain.advance(CONFIG["waiting_for_members_extra_time"])
    assert chain.fails("tick", members[0], run) == "NothingToTick"


def test_resume_cancels_a_pending_pause(chain, core):
    authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    pause(chain, authority, run)
    pause(chain, authority, run, False)
    state = chain.state(run)
    assert not state["pending_pause"] and state["run_state"] == "RoundTrain"
    play_round(chain, core, run, members)
    assert chain.state(run)["run_state"] == "RoundTrain"  # the round went on: no Cooldown
    # running, nothing pending: there is nothing to resume
    assert chain.fails("set_paused", authority, run, {"paused": False}) == "CannotResume"


def test_resume_revalidates_the_configuration(chain):
    authority = chain.wallet()
    run = chain.create_run(authority)
    # nothing configured yet
    failure = chain.failure("set_paused", authority, run, {"paused": False})
    assert failure.name == "ConfigInvalid"
    assert "Program log: epoch_time must be > 0" in failure.logs
    progress = {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
    chain.call("update_config", authority, run, {"config": CONFIG, "progress": progress})
    # a config but no model
    failure = chain.failure("set_paused", authority, run, {"paused": False})
    assert failure.name == "ModelInvalid"
    chain.call("update_model", authority, run, {"model": make_model()})
    pause(chain, authority, run, False)
    pause(chain, authority, run)
    assert chain.state(run)["run_state"] == "Paused"

    # a config that went bad in the account (e.g. written by an older program version) is caught
    state = chain.state(run)
    state["config"]["witness_nodes"] = 0
    chain.write_run(run, state)
    failure = chain.failure("set_paused", authority, run, {"paused": False})
    assert failure.name == "ConfigInvalid"
    assert any("witness_nodes must be > 0" in line for line in failure.logs)
    state["config"]["witness_nodes"] = CONFIG["witness_nodes"]
    state["progress"]["step"] = 0
    chain.write_run(run, state)
    assert chain.fails("set_paused", authority, run, {"paused": False}) == "ProgressInvalid"


def test_uninitialized_run_cannot_be_paused(chain):
    authority = chain.wallet()
    run = chain.create_run(authority)
    assert chain.fails("set_paused", authority, run, {"paused": True}) == "Halted"


def test_finished_run_cannot_resume_or_change_but_can_close(chain, core):
    config = make_config(2, total_steps=2)  # one round and its flush round, then Finished
    authority, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(2)]
    start_epoch(chain, run, members, config)
    play_round(chain, core, run, members)
    assert chain.state(run)["epoch"]["last_step"] == 3  # the round of step 2 only attests step 1
    play_round(chain, core, run, members)
    assert chain.state(run)["run_state"] == "Cooldown"
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Finished"
    assert chain.fails("set_paused", authority, run, {"paused": False}) == "CannotResume"
    assert chain.fails("set_paused", authority, run, {"paused": True}) == "Halted"
    progress = {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
    args = {"config": config, "progress": progress}
    assert chain.fails("update_config", authority, run, args) == "Finished"
    assert chain.fails("update_model", authority, run, {"model": make_model()}) == "Finished"
    assert chain.fails("tick", members[0], run) == "Halted"
    index = chain.run_index_address(b"test-run")
    close = {"run_index": index, "recipient": Keypair().pubkey()}
    # its finishers' points are still in the registry: nobody's are lost to a close; anyone settles them
    assert chain.fails("close_run", authority, run, **close) == "PointsUnclaimed"
    stranger = chain.wallet()
    for member in members:
        chain.settle_points(stranger, run, member.pubkey())
    chain.call("close_run", authority, run, **close)
    assert chain.account_bytes(run) is None
    # the Points accounts outlive the run (one delivered round at the median share: the flush round's
    # decision names the trainers of step 1; the first round's attests the step before the epoch)
    assert {chain.points(run, m.pubkey()) for m in members} == {chain.idl.constants["MEDIAN_SHARE"]}
