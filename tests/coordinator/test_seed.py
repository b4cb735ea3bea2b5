"""The round seed: nobody who sends a transaction that fixes a round's inputs can compute the seed they
lead to. The transaction that ends a round (the last elected witness, or the tick after the witness time;
or the end of Warmup) freezes its inputs (witness digest, next round's members) and records its slot; a
tick in a later slot starts the round with
seed = sha256(previous seed || hash of that slot || witness digest)[0..8]."""

from __future__ import annotations

import hashlib
import struct

from support.coordinator_chain import (
    bitmap,
    elected,
    hash_of_slot,
    make_config,
    make_witness,
    open_run,
    start_epoch,
    start_pending_round,
)

from cohort.sdk.coordinator_core import Env

CLIENTS = 8
CONFIG = make_config(CLIENTS, witness_nodes=2, min_clients=2, epoch_time=100_000)


def current_round(state) -> dict:
    return state["epoch"]["rounds"][state["epoch"]["rounds_head"]]


def expected_seed(last_seed: int, slot_hash: bytes, witness_digest: bytes) -> int:
    digest = hashlib.sha256(struct.pack("<Q", last_seed) + slot_hash + witness_digest).digest()
    return struct.unpack("<Q", digest[:8])[0]


def submit_witnesses(chain, core, run, members, salt: int = 7) -> None:
    step = chain.state(run)["progress"]["step"]
    for index, position in elected(chain, core, run).items():
        chain.call("witness", members[index], run, make_witness(index, position, step, salt=salt))


def epoch(chain):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    return run, members


def test_the_seed_is_the_hash_of_the_slot_the_inputs_froze_in(chain, core):
    run, members = epoch(chain)
    before = chain.state(run)
    submit_witnesses(chain, core, run, members)  # the last elected witness ends the round: inputs freeze
    frozen = chain.state(run)
    assert frozen["seed_pending"] and frozen["seed_slot"] == chain.slot
    assert frozen["run_state"] == "RoundWitness" and frozen["progress"]["step"] == before["progress"]["step"] + 1
    freeze_slot = chain.slot
    assert chain.fails("tick", members[1], run) == "SeedPending"  # the slot's hash does not exist yet
    snapshot = chain.snapshot(run)
    seeds = []
    for later, ticker in ((1, 1), (3, 5)):  # whoever resolves it, whenever: the same seed
        chain.restore(run, snapshot)
        for _ in range(later):
            chain.next_slot()
        chain.call("tick", members[ticker], run)
        state = chain.state(run)
        assert state["run_state"] == "RoundTrain" and not state["seed_pending"]
        seeds.append(current_round(state)["random_seed"])
    witness_digest = current_round(frozen)["witness_digest"]
    assert seeds[0] == seeds[1] == expected_seed(before["last_seed"], hash_of_slot(freeze_slot), witness_digest)
    # a different block in the freezing slot (another fork) is another seed
    chain.restore(run, snapshot)
    chain.next_slot()
    other = hashlib.sha256(b"another fork").digest()
    chain.svm.set_slot_hashes(chain.svm_slot_hashes(replace={freeze_slot: other}))
    chain.call("tick", members[0], run)
    seed = current_round(chain.state(run))["random_seed"]
    assert seed == expected_seed(before["last_seed"], other, witness_digest) != seeds[0]


def test_the_seed_depends_on_the_witness_digest(chain, core):
    run, members = epoch(chain)
    snapshot = chain.snapshot(run)
    seeds, digests = [], []
    for salt in (7, 8):
        chain.restore(run, snapshot)
        submit_witnesses(chain, core, run, members, salt=salt)
        chain.advance(CONFIG["round_witness_time"])
        digests.append(current_round(chain.state(run))["witness_digest"])
        chain.call("tick", members[0], run)
        start_pending_round(chain, run, members[0])
        seeds.append(current_round(chain.state(run))["random_seed"])
    assert digests[0] != digests[1] and seeds[0] != seeds[1]


def test_members_are_frozen_with_the_inputs(chain, core):
    """A member leaving after the freeze (when it could know the seed) does not change the next round's
    trainers, so it cannot redraw the committee by leaving."""
    run, members = epoch(chain)
    submit_witnesses(chain, core, run, members)  # the round ends with its last witness: inputs frozen
    chain.next_slot()
    chain.call("exit_run", members[7], run)  # also starts the round (any instruction does)
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    assert current_round(state)["active_mask"] == bitmap(range(CLIENTS))
    assert state["epoch"]["clients"][7]["state"] == "Withdrawn"


def predicted_next_committee(core, chain, run, signer, witness: dict, freeze_env: Env) -> dict[int, int]:
    """What the attacker's copy of the core says the next committee is, after its witness and a round end
    under `freeze_env` (resolved with whatever SlotHashes it can see)."""
    host = bytearray(chain.run_bytes(run)[8:])
    if core.witness(host, chain.env(run), signer, witness) != 0:
        return {}
    core.tick(host, freeze_env)
    resolve = Env(freeze_env.now, freeze_env.slot_hash, run, freeze_env.slot + 1, freeze_env.slot_hashes)
    core.tick(host, resolve)
    core.take_events()
    round_ = core.round_bytes(bytes(host))
    positions = {i: core.witness_position(round_, i) for i in range(CLIENTS)}
    return {i: p for i, p in positions.items() if p is not None and p < CONFIG["witness_nodes"]}


def test_a_witness_grinding_its_salt_cannot_pick_the_next_committee(chain, core):
    """The attack on the earlier rule: the last elected witness holds back until the round's end is due,
    then tries Bloom salts offline until the next committee includes itself, and sends the witness that
    also ends the round. Now a witness after the witness time is refused (RoundOver), and one sent in
    time cannot know the hash of the slot the round's end freezes in: over 24 rounds, grinding for
    "elect me next" wins as often as honesty does (2 of 8 seats: 6 expected; grinding on the earlier rule
    won every time)."""
    run, members = epoch(chain)
    wins = 0
    for _ in range(24):
        step = chain.state(run)["progress"]["step"]
        (honest, honest_position), (attacker, position) = elected(chain, core, run).items()
        chain.call("witness", members[honest], run, make_witness(honest, honest_position, step))
        chain.advance(CONFIG["max_round_train_time"])
        chain.call("tick", members[honest], run)  # RoundWitness, the attacker still silent
        snapshot = chain.snapshot(run)

        # holding back until the end is due: refused, whatever the salt
        chain.advance(CONFIG["round_witness_time"])
        for salt in range(4):
            late = make_witness(attacker, position, step, salt=salt)
            assert chain.fails("witness", members[attacker], run, late) == "RoundOver"

        # in time, grinding against everything it can see (the freeze slot's hash is not among it)
        chain.restore(run, snapshot)
        chain.advance(CONFIG["round_witness_time"] - 1)
        signer = members[attacker].pubkey()
        freeze = Env(chain.now + 1, chain.slot_hash(), run, chain.slot + 3, tuple(chain.slot_history))
        salt = next((s for s in range(64) if attacker in predicted_next_committee(
            core, chain, run, signer, make_witness(attacker, position, step, salt=s), freeze)), 0)  # fmt: skip
        chain.call("witness", members[attacker], run, make_witness(attacker, position, step, salt=salt))
        assert start_pending_round(chain, run, members[honest])  # its witness ended the round
        wins += attacker in elected(chain, core, run)
    assert wins <= 14, f"the grinding witness won {wins} of 24 rounds"
