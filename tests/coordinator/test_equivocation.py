"""report_equivocation on chain: a trainer's node key signs "cohort result v2" || run || epoch || step || batch
|| commitment for each result it publishes; two such statements for one step with different commitments,
verified by two earlier Ed25519 instructions of the same transaction, convict it (anyone may report):
ClientState Convicted, its unclaimed points forfeited, ClientConvicted. Anything less proves nothing."""

from __future__ import annotations

import hashlib
import struct

import pytest
from solders.instruction import Instruction
from solders.keypair import Keypair
from support.coordinator_chain import (
    elected,
    make_config,
    make_witness,
    open_run,
    play_epoch,
    play_round,
    start_epoch,
)

from cohort.sdk.statements import ED25519_PROGRAM, ed25519_verify_instruction, result_statement

CLIENTS = 4
CONFIG = make_config(CLIENTS, epoch_time=40)
BATCH = (0, 4)


@pytest.fixture
def training(chain, core):
    """(run, members, node keys by epoch index): the second epoch's second round, after a first epoch that
    earned every member points."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    play_epoch(chain, core, run, members, CONFIG)
    keys = [Keypair() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG, keys)
    play_round(chain, core, run, members)
    clients = chain.state(run)["clients"]
    by_identity = {k.pubkey(): k for k in keys}
    by_wallet = {m.pubkey(): m for m in members}
    ordered = [(by_wallet[c["signer"]], by_identity[c["p2p_identity"]]) for c in clients[:CLIENTS]]
    return run, [w for w, _ in ordered], [k for _, k in ordered]


def commitment(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def statement(name: str, batch: tuple[int, int] = BATCH) -> dict:
    return {"batch_start": batch[0], "batch_end": batch[1], "commitment": commitment(name)}


def signed(
    chain,
    key: Keypair,
    run,
    step: int,
    name: str,
    batch: tuple[int, int] = BATCH,
    epoch: int | None = None,
) -> Instruction:
    """`key`'s statement of `step`, of the epoch the chain is in unless `epoch` says otherwise."""
    epoch = chain.state(run)["epoch"]["epoch"] if epoch is None else epoch
    message = result_statement(chain.idl, run, epoch, step, batch, commitment(name))
    return ed25519_verify_instruction(
        bytes(key.pubkey()), bytes(key.sign_message(message)), message
    )


def report(chain, reporter, run, index: int, step: int, first: dict, second: dict) -> Instruction:
    args = {"index": index, "step": step, "first": first, "second": second}
    return chain.call_ix("report_equivocation", reporter, run, args)


def test_two_results_for_one_step_convict_the_trainer(chain, training):
    run, members, keys = training
    state = chain.state(run)
    step = state["progress"]["step"] - 1  # the step its round trained
    accused = 2
    entry = state["clients"][accused]["registry_index"]
    earned = state["registry"][entry]["earned"]
    assert earned > 0
    reporter = chain.wallet()  # anyone may report
    ixs = [signed(chain, keys[accused], run, step, "honest"), signed(chain, keys[accused], run, step, "forged"),
           report(chain, reporter, run, accused, step, statement("honest"), statement("forged"))]  # fmt: skip
    result = chain.send(ixs, [reporter])
    after = chain.state(run)
    height = after["epoch"]["rounds"][after["epoch"]["rounds_head"]]["height"]
    convicted = after["clients"][accused]
    assert convicted["state"] == "Convicted" and convicted["exited_height"] == height
    assert after["registry"][entry]["earned"] == 0
    assert after["epoch"]["members_nonce"] == state["epoch"]["members_nonce"] + 1
    assert chain.idl.events_in_logs(list(result.logs()), chain.program_id) == [
        ("ClientConvicted", {"run": run, "signer": members[accused].pubkey(), "index": accused,
                             "reason": "Equivocation", "_pad": 0, "step": step, "forfeited": earned})
    ]  # fmt: skip
    # once is enough; and a convicted client neither witnesses nor claims
    assert chain.send_fails(ixs, [reporter], run).name == "NoChange"
    now = after["progress"]["step"]
    assert (
        chain.fails("witness", members[accused], run, make_witness(accused, 0, now))
        == "InvalidWitness"
    )
    assert chain.fails("claim_points", members[accused], run) == "NoChange"


def test_anything_less_proves_nothing(chain, training):
    run, _, keys = training
    step = chain.state(run)["progress"]["step"] - 1
    accused, key = 1, keys[1]
    reporter = chain.wallet()
    a, b = statement("a"), statement("b")
    other_run = chain.create_run(chain.wallet(), b"other-run")

    def refused(*ixs: Instruction) -> str:
        return chain.send_fails(list(ixs), [reporter], run).name

    good = report(chain, reporter, run, accused, step, a, b)
    # one commitment twice: no equivocation
    assert refused(signed(chain, key, run, step, "a"), signed(chain, key, run, step, "a"),
                   report(chain, reporter, run, accused, step, a, a)) == "EquivocationNotProven"  # fmt: skip
    # the second statement signed by another member's key
    assert refused(
        signed(chain, key, run, step, "a"), signed(chain, keys[0], run, step, "b"), good
    ) == ("EquivocationNotProven")
    # statements about another run, or another step than the report names
    assert refused(
        signed(chain, key, other_run, step, "a"), signed(chain, key, other_run, step, "b"), good
    ) == ("EquivocationNotProven")
    assert refused(
        signed(chain, key, run, step - 1, "a"), signed(chain, key, run, step - 1, "b"), good
    ) == ("EquivocationNotProven")
    # another batch than the statement the report names (the signed bytes differ)
    assert refused(
        signed(chain, key, run, step, "a", (4, 8)), signed(chain, key, run, step, "b"), good
    ) == ("EquivocationNotProven")
    # one proof only, or the proofs after the report
    assert refused(signed(chain, key, run, step, "a"), good) == "EquivocationNotProven"
    assert refused(
        good, signed(chain, key, run, step, "a"), signed(chain, key, run, step, "b")
    ) == ("EquivocationNotProven")
    # a step outside the epoch (before its start, or not yet trained), an index that is no member
    start = chain.state(run)["epoch"]["start_step"]
    for wrong in (start - 1, chain.state(run)["progress"]["step"] + 1):
        assert refused(signed(chain, key, run, wrong, "a"), signed(chain, key, run, wrong, "b"),
                       report(chain, reporter, run, accused, wrong, a, b)) == "WrongStep"  # fmt: skip
    assert refused(signed(chain, key, run, step, "a"), signed(chain, key, run, step, "b"),
                   report(chain, reporter, run, CLIENTS, step, a, b)) == "NotInEpoch"  # fmt: skip
    assert chain.state(run)["clients"][accused]["state"] == "Healthy"


def test_offsets_that_point_into_another_instruction_prove_nothing(chain, training):
    """The reporter signs both statements with its own key (instructions 1 and 3); instructions 0 and 2
    hold the accused's key and the statements in their own data but tell the native program to check
    instructions 1 and 3. The native program accepts all four; the coordinator reads only offsets into an
    instruction's own data, so it sees no signature by the accused."""
    run, _, keys = training
    step = chain.state(run)["progress"]["step"] - 1
    reporter, forger = chain.wallet(), Keypair()
    ixs = []
    for name in ("a", "b"):
        honest = signed(chain, forger, run, step, name)  # 16: key, 48: signature, 112: message
        message = bytes(honest.data)[112:]
        at = len(ixs) + 1  # the honest instruction's index
        offsets = struct.pack("<7H", 48, at, 16, at, 112, len(message), at)
        decoy = bytes([1, 0]) + offsets + bytes(keys[0].pubkey()) + bytes(64) + message
        ixs += [Instruction(ED25519_PROGRAM, decoy, []), honest]
    chain.send(ixs)  # the native program is satisfied
    ixs.append(report(chain, reporter, run, 0, step, statement("a"), statement("b")))
    assert chain.send_fails(ixs, [reporter], run).name == "EquivocationNotProven"
    assert chain.state(run)["clients"][0]["state"] == "Healthy"


def test_a_rewound_step_pairs_no_old_statement_with_a_new_one(chain, core):
    """The authority pauses the run and rewinds its step: step s is trained again in a later epoch. An
    honest member's statement of s from before and its new one differ in their epoch, so together they
    prove nothing; and the epoch number itself cannot be moved back."""
    authority, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    keys = [Keypair() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG, keys)
    play_round(chain, core, run, members)
    state = chain.state(run)
    step, first_epoch = state["progress"]["step"] - 1, state["epoch"]["epoch"]
    old = signed(chain, keys[1], run, step, "old")
    chain.call("set_paused", authority, run, {"paused": True})
    while chain.state(run)["run_state"] == "RoundTrain":
        play_round(chain, core, run, members)
    chain.advance(CONFIG["cooldown_time"])
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "Paused" and state["progress"]["epoch"] == first_epoch + 1
    rewound = {**state["progress"], "step": state["epoch"]["start_step"]}
    back = {"config": CONFIG, "progress": {**rewound, "epoch": first_epoch}}
    assert chain.fails("update_config", authority, run, back) == "ProgressInvalid"
    chain.call("update_config", authority, run, {"config": CONFIG, "progress": rewound})
    chain.call("set_paused", authority, run, {"paused": False})
    start_epoch(chain, run, members, CONFIG, keys)
    play_round(chain, core, run, members)
    state = chain.state(run)
    assert state["progress"]["step"] - 1 == step and state["epoch"]["epoch"] == first_epoch + 1
    new = signed(chain, keys[1], run, step, "new")
    reporter = chain.wallet()
    ixs = [old, new, report(chain, reporter, run, 1, step, statement("old"), statement("new"))]
    assert chain.send_fails(ixs, [reporter], run).name == "EquivocationNotProven"
    assert chain.state(run)["clients"][1]["state"] == "Healthy"
    # two statements of this epoch's step s still convict
    twin = signed(chain, keys[1], run, step, "twin")
    chain.send(
        [new, twin, report(chain, reporter, run, 1, step, statement("new"), statement("twin"))],
        [reporter],
    )
    assert chain.state(run)["clients"][1]["state"] == "Convicted"


def test_a_seat_convicted_mid_round_leaves_its_seat_empty(chain, core, training):
    """A seat votes, then is convicted: its record counts for nothing (one more seat with its root does not
    decide), nobody takes its seat, and the two other seats decide alone."""
    run, members, keys = training
    state = chain.state(run)
    now, step = state["progress"]["step"], state["progress"]["step"] - 1
    seats = list(elected(chain, core, run).items())
    (liar, liar_seat), (second, second_seat), (third, third_seat) = seats
    root = b"\x0c" * 32
    chain.call("witness", members[liar], run, make_witness(liar, liar_seat, now, root=root))
    reporter = chain.wallet()
    chain.send([signed(chain, keys[liar], run, step, "a"), signed(chain, keys[liar], run, step, "b"),
                report(chain, reporter, run, liar, step, statement("a"), statement("b"))], [reporter])  # fmt: skip
    assert elected(chain, core, run) == dict(
        seats
    )  # fixed for the round: the seat is empty, not passed on
    chain.call("witness", members[second], run, make_witness(second, second_seat, now, root=root))
    round_ = chain.state(run)["epoch"]["rounds"][chain.state(run)["epoch"]["rounds_head"]]
    assert not round_["decided"] and round_["witnesses_len"] == 2
    chain.call("witness", members[third], run, make_witness(third, third_seat, now, root=root))
    state = chain.state(run)
    decided = state["epoch"]["rounds"][(state["epoch"]["rounds_head"] - 1) % 4]
    if state["seed_pending"]:
        decided = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    assert decided["decided"] and decided["decided_votes"] == 2
