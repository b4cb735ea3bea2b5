"""Round seeds, fixed one round ahead. When round h starts it takes the seed and trainers fixed when round
h-1 started (Run.next_seed, next_mask), derives round h+1's from the inputs that froze when round h-1
started (next_seed = sha256(last seed || hash of the slot they froze in)[0..8], next_mask = the healthy
clients frozen then), and freezes the inputs again (seed_slot, seed_mask) for round h+2. So the instruction
that decides round h's step, from any later slot, starts round h+1 itself: no tick between rounds. The
first round of an epoch derives its own seed from the inputs frozen when Warmup ended, and round 2's as
sha256("cohort/next-seed" || seed)[0..8]. Nobody who sends a transaction that fixes an input can know the
freezing slot's hash, and no witness record (written after the freeze) feeds a seed; when SlotHashes no
longer proves which block followed that slot, the inputs freeze again instead of using a hash that has
long been public."""

from __future__ import annotations

import hashlib
import struct

from support.coordinator_chain import (
    ALL_PARTICIPANTS,
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

CLIENTS = 8
CONFIG = make_config(CLIENTS, epoch_time=100_000)  # witness_nodes 3 (quorum 2)


def current_round(state) -> dict:
    return state["epoch"]["rounds"][state["epoch"]["rounds_head"]]


def previous_round(state) -> dict:
    rounds = state["epoch"]["rounds"]
    return rounds[(state["epoch"]["rounds_head"] - 1) % len(rounds)]


def derived(last_seed: int, slot_hash: bytes) -> int:
    digest = hashlib.sha256(struct.pack("<Q", last_seed) + slot_hash).digest()
    return struct.unpack("<Q", digest[:8])[0]


def followed(seed: int) -> int:
    digest = hashlib.sha256(b"cohort/next-seed" + struct.pack("<Q", seed)).digest()
    return struct.unpack("<Q", digest[:8])[0]


def decide(
    chain, core, run, members, digest: int = 7, participants: bytes = ALL_PARTICIPANTS
) -> None:
    """A strict majority of the seats agrees: the step is decided and the round ends."""
    step = chain.state(run)["progress"]["step"]
    for index, position in list(elected(chain, core, run).items())[
        : core.quorum(CONFIG["witness_nodes"])
    ]:
        witness = make_witness(index, position, step, participants, digest=digest)
        chain.call("witness", members[index], run, witness)
    assert chain.state(run)["progress"]["step"] == step + 1


def epoch(chain):
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    begin_epoch(chain, run, members, CONFIG)
    return run, members


def test_seeds_and_trainers_are_fixed_one_round_ahead(chain, core):
    """Round h+1's seed and trainers are in next_seed / next_mask from round h's start, and become round
    h+1's when it starts, in the instruction that decides round h from a later slot; every client knows
    its next batch a round ahead."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    begin_warmup(chain, run, members, CONFIG)
    for index in range(CONFIG["witness_nodes"]):
        chain.call("warmup_witness", members[index], run, {"index": index})
    warmup = chain.state(run)
    start_pending_round(chain, run, members[0])
    first = chain.state(run)
    seed = current_round(first)["random_seed"]
    assert seed == derived(warmup["last_seed"], hash_of_slot(warmup["seed_slot"]))
    assert first["next_seed"] == followed(seed)  # the epoch's first round also fixes the second's
    assert first["next_mask"] == current_round(first)["active_mask"] == bitmap(range(CLIENTS))
    assert first["seed_slot"] == chain.slot and first["seed_mask"] == bitmap(range(CLIENTS))

    announced = first
    for _ in range(3):
        chain.next_slot()
        decide(chain, core, run, members)
        state = chain.state(run)
        round_ = current_round(state)
        assert state["run_state"] == "RoundTrain" and not state["seed_pending"]
        assert round_["random_seed"] == announced["next_seed"]
        assert round_["active_mask"] == announced["next_mask"]
        # the round after: from the inputs frozen when the round that just ended started
        assert state["next_seed"] == derived(
            announced["last_seed"], hash_of_slot(announced["seed_slot"])
        )
        assert state["next_mask"] == announced["seed_mask"]
        assert state["last_seed"] == state["next_seed"] and state["seed_slot"] == chain.slot
        # the seats of the next round are known now (the order is a pure function of seed and trainers)
        assert witness_order(round_["random_seed"], round_["active_mask"])[:3] == list(
            elected(chain, core, run)
        )
        announced = state


def test_the_seed_cannot_be_computed_before_the_freeze_slot_has_a_hash(chain, core):
    """The instruction that starts a round freezes the inputs of a later seed in its slot. A step decided
    in that same slot ends its round, but the next waits: a tick in that slot fails (the hash does not
    exist yet). From any later slot, whoever ticks, the derived seed is the same, and another block in
    the freezing slot (another fork) is another seed."""
    run, members = epoch(chain)
    before = chain.state(run)
    freeze_slot = before["seed_slot"]
    decide(chain, core, run, members)
    frozen = chain.state(run)
    assert freeze_slot == chain.slot and frozen["seed_slot"] == freeze_slot
    assert frozen["seed_pending"] and frozen["run_state"] == "RoundWitness"
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
    assert seeds[0] == seeds[1] == derived(before["last_seed"], hash_of_slot(freeze_slot))
    chain.restore(run, snapshot)
    chain.next_slot()
    other = hashlib.sha256(b"another fork").digest()
    chain.svm.set_slot_hashes(chain.svm_slot_hashes(replace={freeze_slot: other}))
    chain.call("tick", members[0], run)
    assert chain.state(run)["next_seed"] == derived(before["last_seed"], other) != seeds[0]


def test_a_deciding_witness_grinding_its_record_cannot_pick_a_later_committee(chain, core):
    """The attack on a seed fed by witness records: the witness whose record decides the step tries
    records offline (its weights digest, which nobody checks, or whom it saw) for one that seats it
    later. The seed its decision fixes was frozen when its round began, before any record of the round
    existed: every record it can send gives the same seed."""
    run, members = epoch(chain)
    snapshot = chain.snapshot(run)
    seeds, records = set(), set()
    for weights, seen in (
        (7, ALL_PARTICIPANTS),
        (8, ALL_PARTICIPANTS),
        (9, bitmap(range(CLIENTS - 1))),
    ):
        chain.restore(run, snapshot)
        chain.next_slot()
        decide(chain, core, run, members, digest=weights, participants=seen)
        state = chain.state(run)
        assert state["run_state"] == "RoundTrain"
        head = (state["epoch"]["rounds_head"] - 1) % len(state["epoch"]["rounds"])
        records.add(
            repr(state["witnesses"][head]["records"][: previous_round(state)["witnesses_len"]])
        )
        seeds.add(state["next_seed"])
    assert len(records) == 3 and len(seeds) == 1


def test_members_are_frozen_with_the_inputs(chain, core):
    """A member leaving after the freeze (when it could know the seed once that slot is over) does not
    change the trainers frozen with it, so it cannot redraw a committee by leaving."""
    run, members = epoch(chain)
    chain.next_slot()
    seats = elected(chain, core, run)
    leaver = next(i for i in range(CLIENTS) if i not in seats)
    chain.call("exit_run", members[leaver], run)
    state = chain.state(run)
    assert state["clients"][leaver]["state"] == "Withdrawn" and state["seed_mask"] == bitmap(
        range(CLIENTS)
    )
    decide(chain, core, run, members)
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain" and state["next_mask"] == bitmap(range(CLIENTS))
    assert state["seed_mask"] == bitmap(i for i in range(CLIENTS) if i != leaver)


def test_inputs_freeze_again_when_the_freeze_slot_aged_out_of_slot_hashes(chain, core):
    """The round lasted longer than SlotHashes reaches back (it lists the last 512 blocks): the
    instruction that ends it cannot prove which block followed the freezing slot, so the inputs freeze
    again in its own slot (the old slot's hash may have been public for minutes), and the tick from the
    next slot starts the round from the new slot's hash."""
    run, members = epoch(chain)
    before = chain.state(run)
    old_slot = before["seed_slot"]
    chain.slot += SLOT_HASHES_MAX + 1  # the oldest listed entry is now after the freezing slot
    chain.next_slot()
    assert min(s for s, _ in chain.slot_history) > old_slot
    decide(chain, core, run, members)
    state = chain.state(run)
    assert (
        state["seed_pending"]
        and state["seed_slot"] == chain.slot
        and state["run_state"] == "RoundWitness"
    )
    assert state["next_seed"] == before["next_seed"]  # nothing derived from the stale hash
    chain.next_slot()
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    assert state["next_seed"] == derived(before["last_seed"], hash_of_slot(chain.slot - 1))
