"""Owner actions that would change nothing fail by name and write nothing (a success bumps the nonce, and
every subscriber then receives the whole 112 KB account again), and instruction arguments must be in
their one canonical encoding (zero padding). `chain.fails` checks the account bytes are unchanged."""

from __future__ import annotations

import pytest
from solders.pubkey import Pubkey
from support.coordinator_chain import make_config, make_model, open_run, play_round, start_epoch

CONFIG = make_config(4)
PROGRESS = {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
METADATA = {
    "name": b"run",
    "description": b"d",
    "client_version": b"1",
    "num_parameters": 1,
    "vocab_size": 2,
}


def test_owner_actions_that_change_nothing_are_refused(chain):
    authority, run = open_run(chain, CONFIG)
    chain.call("update_metadata", authority, run, {"metadata": METADATA})
    assert chain.fails("update_metadata", authority, run, {"metadata": METADATA}) == "NoChange"
    keeper = chain.wallet().pubkey()
    checkpointers = {"checkpointers": [keeper] + [Pubkey.default()] * 7}
    chain.call("set_checkpointers", authority, run, checkpointers)
    assert chain.fails("set_checkpointers", authority, run, checkpointers) == "NoChange"
    # a pause pending on a running round
    members = [chain.wallet() for _ in range(4)]
    start_epoch(chain, run, members, CONFIG)
    chain.call("set_paused", authority, run, {"paused": True})
    assert chain.state(run)["pending_pause"]
    assert chain.fails("set_paused", authority, run, {"paused": True}) == "NoChange"


def test_identical_config_model_and_checkpoint_are_refused(chain):
    authority, run = open_run(chain, CONFIG)
    chain.call("set_paused", authority, run, {"paused": True})
    args = {"config": CONFIG, "progress": PROGRESS}
    assert chain.fails("update_config", authority, run, args) == "NoChange"
    assert chain.fails("update_model", authority, run, {"model": make_model()}) == "NoChange"
    chain.call(
        "update_config", authority, run, {"config": CONFIG, "progress": PROGRESS | {"step": 2}}
    )
    keeper = chain.wallet()
    chain.call(
        "set_checkpointers",
        authority,
        run,
        {"checkpointers": [keeper.pubkey()] + [Pubkey.default()] * 7},
    )
    pointer = {"checkpoint": make_model()["checkpoint"]}  # the one the run already has
    assert chain.fails("checkpoint", keeper, run, pointer) == "NoChange"


def test_granting_what_is_granted_or_revoking_what_is_not_is_refused(chain):
    authority, run = open_run(chain, make_config(4, join_policy="Authorized"))
    grantee = chain.wallet().pubkey()
    address = chain.join_authorization_address(run, grantee)
    accounts = {"join_authority": authority.pubkey(), "run": run, "authorization": address}

    def grant(allowed: bool):
        return [
            chain.ix("set_join_authorization", accounts, {"grantee": grantee, "allowed": allowed})
        ]

    assert chain.send_fails(grant(False), [authority], address).name == "NoChange"  # none exists
    chain.send(grant(True), [authority])
    assert chain.send_fails(grant(True), [authority], address).name == "NoChange"
    chain.send(grant(False), [authority])
    assert chain.send_fails(grant(False), [authority], address).name == "NoChange"


def padded(model: dict, where: str) -> dict:
    model = {**model, "checkpoint": dict(model["checkpoint"]), "lr_schedule": dict(model["lr_schedule"]),
             "optimizer": dict(model["optimizer"])}  # fmt: skip
    if where == "model":
        model["_pad"] = b"\x00\x01"
    else:
        model[where]["_pad"] = b"\x01\x00\x00"
    return model


@pytest.mark.parametrize("where", ["model", "checkpoint", "lr_schedule", "optimizer"])
def test_non_zero_padding_is_refused(chain, where):
    authority, run = open_run(chain, CONFIG)
    chain.call("set_paused", authority, run, {"paused": True})
    failure = chain.failure("update_model", authority, run, {"model": padded(make_model(), where)})
    assert failure.name == "NonCanonical"
    assert any("padding" in line for line in failure.logs)


def test_non_zero_config_padding_is_refused(chain):
    authority, run = open_run(chain, CONFIG)
    chain.call("set_paused", authority, run, {"paused": True})
    config = CONFIG | {"_pad": bytes(1) + b"\x01"}
    progress = chain.state(run)["progress"]
    failure = chain.failure(
        "update_config", authority, run, {"config": config, "progress": progress}
    )
    assert failure.name == "NonCanonical"
    assert any("padding" in line for line in failure.logs)


def test_non_canonical_checkpoint_and_health_check_arguments_are_refused(chain, core):
    authority, run = open_run(chain, CONFIG)
    keeper = chain.wallet()
    chain.call(
        "set_checkpointers",
        authority,
        run,
        {"checkpointers": [keeper.pubkey()] + [Pubkey.default()] * 7},
    )
    pointer = dict(make_model()["checkpoint"], repo=b"cohort/other", _pad=b"\x00\x00\x07")
    assert chain.fails("checkpoint", keeper, run, {"checkpoint": pointer}) == "NonCanonical"
    members = [chain.wallet() for _ in range(4)]
    start_epoch(chain, run, members, CONFIG)
    play_round(chain, core, run, members)
    play_round(chain, core, run, members)
    # one listed index, a stray non-zero index in the unused part
    step = chain.state(run)["progress"]["step"] - 2
    args = {"step": step, "count": 1, "indices": [1] + [0] * 30 + [3]}
    assert chain.fails("health_check", members[0], run, args) == "NonCanonical"
    assert (
        chain.fails("health_check", members[0], run, {**args, "indices": [1] + [0] * 31, "_pad": 1})
        == "NonCanonical"
    )
