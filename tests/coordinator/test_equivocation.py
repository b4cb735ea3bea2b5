"""report_equivocation on chain: a trainer's node key signs "cohort result v1" || run || step || batch ||
commitment for each result it publishes; two such statements for one step with different commitments,
verified by two earlier Ed25519 instructions of the same transaction, convict it (anyone may report):
ClientState Convicted, its unclaimed points forfeited, ClientConvicted. Anything less proves nothing."""

from __future__ import annotations

import hashlib
import struct

import pytest
from solders.instruction import Instruction
from solders.keypair import Keypair
from support.coordinator_chain import (
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


def signed(chain, key: Keypair, run, step: int, name: str, batch: tuple[int, int] = BATCH) -> Instruction:
    message = result_statement(chain.idl, run, step, batch, commitment(name))
    return ed25519_verify_instruction(bytes(key.pubkey()), bytes(key.sign_message(message)), message)


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
    assert chain.fails("witness", members[accused], run, make_witness(accused, 0, now)) == "InvalidWitness"
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
    assert refused(signed(chain, key, run, step, "a"), signed(chain, keys[0], run, step, "b"), good) == (
        "EquivocationNotProven")
    # statements about another run, or another step than the report names
    assert refused(signed(chain, key, other_run, step, "a"), signed(chain, key, other_run, step, "b"), good) == (
        "EquivocationNotProven")
    assert refused(signed(chain, key, run, step - 1, "a"), signed(chain, key, run, step - 1, "b"), good) == (
        "EquivocationNotProven")
    # another batch than the statement the report names (the signed bytes differ)
    assert refused(signed(chain, key, run, step, "a", (4, 8)), signed(chain, key, run, step, "b"), good) == (
        "EquivocationNotProven")
    # one proof only, or the proofs after the report
    assert refused(signed(chain, key, run, step, "a"), good) == "EquivocationNotProven"
    assert refused(good, signed(chain, key, run, step, "a"), signed(chain, key, run, step, "b")) == (
        "EquivocationNotProven")
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
