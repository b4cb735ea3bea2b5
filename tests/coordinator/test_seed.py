"""Round seeds, fixed one round ahead. When round h starts it takes the seed and trainers fixed when round
h-1 started (Run.next_seed, next_mask), and derives round h+1's from the inputs that froze when round h-1
ended: next_seed = sha256(last seed || hash of the slot they froze in || witness digest of round h-1)[0..8],
next_mask = the healthy clients frozen then. The first round of an epoch derives its own seed that way and
round 2's as sha256("cohort/next-seed" || seed)[0..8]. Nobody who sends a transaction that fixes an input
can know the freezing slot's hash; when SlotHashes no longer proves which block followed that slot, the
inputs freeze again instead of using a hash that has long been public."""

from __future__ import annotations

import hashlib
import struct

from support.coordinator_chain import (
    SLOT_HASHES_MAX,
    begin_warmup,
    bitmap,
    elected,
    hash_of_slot,
    make_config,
    make_witness,
    open_run,
    start_pending_round,
    witness_order,
)
from support.coordinator_chain import start_epoch as begin_epoch

from cohort.sdk.coordinator_core import Env

CLIENTS = 8
CONFIG = make_config(CLIENTS, epoch_time=100_000)  # witness_nodes 3 (quorum 2)


def current_round(state) -> dict:
    return state["epoch"]["rounds"][state["epoch"]["rounds_head"]]


def derived(last_seed: int, slot_hash: bytes, witness_digest: bytes) -> int:
    digest = hashlib.sha256(struct.pack("<Q", last_seed) + slot_hash + witness_digest).digest()
    return struct.unpack("<Q", digest[:8])[0]


def followed(seed: int) -> int:
    digest = hashlib.sha256(b"cohort/next-seed" + struct.pack("<Q", seed)).digest()
    return struct.unpack("<Q", digest[:8])[0]


def decide(chain, core, run, members, digest: int = 7) -> None:
    """A strict majority of the seats agrees: the step is decided and the round's inputs freeze."""
    step = chain.state(run)["progress"]["step"]
    for index, position in list(elected(chain, core, run).items())[: core.quorum(CONFIG["witness_nodes"])]:
        chain.call("witness", members[index], run, make_witness(index, position, step, digest=digest))
    assert chain.state(run)["seed_pending"]


def epoch(chain):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    begin_epoch(chain, run, members, CONFIG)
    return run, members


def test_seeds_and_trainers_are_fixed_one_round_ahead(chain, core):
    """Round h+1's seed and trainers are in next_seed / next_mask from round h's start, and become round
    h+1's when it starts, whoever starts it; every client knows its next batch a round ahead."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    begin_warmup(chain, run, members, CONFIG)
    for index in range(CONFIG["witness_nodes"]):
        chain.call("warmup_witness", members[index], run, {"index": index})
    warmup = chain.state(run)
    freeze_slot = warmup["seed_slot"]
    start_pending_round(chain, run, members[0])
    first = chain.state(run)
    seed = current_round(first)["random_seed"]
    warmup_digest = current_round(warmup)["witness_digest"]
    assert seed == derived(warmup["last_seed"], hash_of_slot(freeze_slot), warmup_digest)
    assert first["next_seed"] == followed(seed)  # the epoch's first round also fixes the second's
    assert first["next_mask"] == current_round(first)["active_mask"] == bitmap(range(CLIENTS))

    announced = first
    for _ in range(3):
        decide(chain, core, run, members)
        frozen = chain.state(run)
        start_pending_round(chain, run, members[3])
        state = chain.state(run)
        round_ = current_round(state)
        assert round_["random_seed"] == announced["next_seed"]
        assert round_["active_mask"] == announced["next_mask"]
        assert state["next_seed"] == derived(
            announced["last_seed"], hash_of_slot(frozen["seed_slot"]), current_round(frozen)["witness_digest"]
        )
        assert state["last_seed"] == state["next_seed"]
        # the seats of the next round are known now (the order is a pure function of seed and trainers)
        assert witness_order(round_["random_seed"], round_["active_mask"])[:3] == list(elected(chain, core, run))
        announced = state


def test_the_seed_cannot_be_computed_before_the_freeze_slot_has_a_hash(chain, core):
    """The instruction that decides the step freezes the inputs in its slot; a tick in that slot fails
    (its hash does not exist yet). From any later slot, whoever ticks, the derived seed is the same, and
    another block in the freezing slot (another fork) is another seed."""
    run, members = epoch(chain)
    before = chain.state(run)
    decide(chain, core, run, members)
    frozen = chain.state(run)
    freeze_slot = frozen["seed_slot"]
    assert freeze_slot == chain.slot and frozen["run_state"] == "RoundWitness"
    assert chain.fails("tick", members[1], run) == "SeedPending"
    snapshot = chain.snapshot(run)
    seeds = []
    for later, ticker in ((1, 1), (3, 5)):
        chain.restore(run, snapshot)
        for _ in range(later):
            chain.next_slot()
        chain.call("tick", members[ticker], run)
        state = chain.state(run)
        assert state["run_state"] == "RoundTrain" and not state["seed_pending"]
        seeds.append(state["next_seed"])
    digest = current_round(frozen)["witness_digest"]
    assert seeds[0] == seeds[1] == derived(before["last_seed"], hash_of_slot(freeze_slot), digest)
    chain.restore(run, snapshot)
    chain.next_slot()
    other = hashlib.sha256(b"another fork").digest()
    chain.svm.set_slot_hashes(chain.svm_slot_hashes(replace={freeze_slot: other}))
    chain.call("tick", members[0], run)
    assert chain.state(run)["next_seed"] == derived(before["last_seed"], other, digest) != seeds[0]


def test_the_seed_depends_on_the_witness_records(chain, core):
    run, members = epoch(chain)
    snapshot = chain.snapshot(run)
    seeds, digests = [], []
    for weights in (7, 8):
        chain.restore(run, snapshot)
        decide(chain, core, run, members, digest=weights)
        digests.append(current_round(chain.state(run))["witness_digest"])
        start_pending_round(chain, run, members[0])
        seeds.append(chain.state(run)["next_seed"])
    assert digests[0] != digests[1] and seeds[0] != seeds[1]


def test_members_are_frozen_with_the_inputs(chain, core):
    """A member leaving after the freeze (when it could know the seed) does not change the trainers
    frozen with it, so it cannot redraw a committee by leaving."""
    run, members = epoch(chain)
    decide(chain, core, run, members)
    chain.next_slot()
    chain.call("exit_run", members[7], run)  # also starts the round (any instruction does)
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    assert state["next_mask"] == bitmap(range(CLIENTS))
    assert state["clients"][7]["state"] == "Withdrawn"


def test_inputs_freeze_again_when_the_freeze_slot_aged_out_of_slot_hashes(chain, core):
    """Nobody started the round while SlotHashes could prove which block followed the freezing slot:
    the first tick after that re-freezes the inputs in its own slot (the old slot's hash may have been
    public for minutes), and the tick from the next slot starts the round from the new slot's hash."""
    run, members = epoch(chain)
    decide(chain, core, run, members)
    before = chain.state(run)
    old_slot = before["seed_slot"]
    chain.slot += SLOT_HASHES_MAX + 1  # the oldest listed entry is now after the freezing slot
    chain.next_slot()
    assert min(s for s, _ in chain.slot_history) > old_slot
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["seed_pending"] and state["seed_slot"] == chain.slot and state["run_state"] == "RoundWitness"
    assert state["next_seed"] == before["next_seed"]  # nothing derived from the stale hash
    chain.next_slot()
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    digest = current_round(before)["witness_digest"]
    assert state["next_seed"] == derived(before["last_seed"], hash_of_slot(chain.slot - 1), digest)


def predicted_seats(core, chain, run, signer, witness: dict, freeze_env: Env) -> list[int]:
    """What the attacker's copy of the core says the seats of the round its record feeds are, after its
    witness (which decides) in `freeze_env`'s slot, guessing that slot's hash from the latest one it can
    see (it cannot see the real one: the slot is not over)."""
    host = bytearray(chain.run_bytes(run)[8:])
    if core.witness(host, freeze_env, signer, witness) != 0:
        return []
    guess = ((freeze_env.slot, freeze_env.slot_hash), *freeze_env.slot_hashes)
    resolve = Env(freeze_env.now, freeze_env.slot_hash, run, freeze_env.slot + 1, guess)
    core.tick(host, resolve)
    core.take_events()
    state = core.idl.decode_account("Run", core.idl.accounts["Run"] + bytes(host))
    return witness_order(state["next_seed"], state["next_mask"])[: CONFIG["witness_nodes"]]


def test_a_deciding_witness_grinding_its_record_cannot_pick_a_later_committee(chain, core):
    """The attack on the earlier rule: the witness whose record decides the step tries records offline
    (here its weights digest, which nobody checks) until the committee its record feeds includes itself.
    The seed its record feeds is derived from the hash of the slot its own transaction runs in, which it
    cannot know: over 24 rounds it is seated about as often as chance has it (3 of 8 seats: 9 expected)."""
    run, members = epoch(chain)
    wins = 0
    for _ in range(24):
        step = chain.state(run)["progress"]["step"]
        (honest, honest_position), (attacker, position) = list(elected(chain, core, run).items())[:2]
        chain.call("witness", members[honest], run, make_witness(honest, honest_position, step))
        signer = members[attacker].pubkey()
        freeze = Env(chain.now, chain.slot_hash(), run, chain.slot, tuple(chain.slot_history))
        digest = next((d for d in range(64) if attacker in predicted_seats(
            core, chain, run, signer, make_witness(attacker, position, step, digest=d), freeze)), 0)  # fmt: skip
        chain.call("witness", members[attacker], run, make_witness(attacker, position, step, digest=digest))
        assert start_pending_round(chain, run, members[honest])  # its record decided the step
        state = chain.state(run)
        wins += attacker in witness_order(state["next_seed"], state["next_mask"])[: CONFIG["witness_nodes"]]
    assert wins <= 16, f"the grinding witness was seated in {wins} of 24 rounds"
