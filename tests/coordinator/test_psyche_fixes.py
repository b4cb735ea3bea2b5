"""One test per weak point of Psyche's coordinator that this program fixes (psyche-reference §6), each
showing on chain that the Psyche behaviour is gone."""

from __future__ import annotations

import hashlib

from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from support.coordinator_chain import (
    begin_warmup,
    elected,
    make_config,
    make_witness,
    open_run,
    play_round,
    start_epoch,
    start_pending_round,
)

CLIENTS = 4
CONFIG = make_config(CLIENTS)  # min_clients 2, witness_nodes 3 (quorum 2)


def test_witness_is_bound_to_its_step(chain, core):
    """Psyche's witness carried no step: a stale one counted wherever its position matched. A witness
    replayed from the previous round is refused even at an index and a seat held now."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    old_step = chain.state(run)["progress"]["step"]
    play_round(chain, core, run, members)
    seats = list(elected(chain, core, run).items())
    for index, position in seats:
        stale = make_witness(index, position, old_step)
        assert chain.fails("witness", members[index], run, stale) == "WrongStep"
    for index, position in seats[: core.quorum(CONFIG["witness_nodes"])]:
        chain.call("witness", members[index], run, make_witness(index, position, old_step + 1))
    assert chain.state(run)["seed_pending"]  # the current step's records decided it


def test_warmup_witness_index_must_be_the_senders_own(chain):
    """Psyche accepted any index: one client could send every warmup witness and start training early."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    begin_warmup(chain, run, members, CONFIG)
    chain.call("warmup_witness", members[0], run, {"index": 0})
    for index in (1, 2, 3):
        assert chain.fails("warmup_witness", members[0], run, {"index": index}) == "InvalidWitness"
    assert chain.state(run)["run_state"] == "Warmup"
    chain.call("warmup_witness", members[2], run, {"index": 2})
    chain.call("warmup_witness", members[3], run, {"index": 3})
    assert start_pending_round(chain, run, members[0])
    assert chain.state(run)["run_state"] == "RoundTrain"


def test_quorum_is_relative_to_the_configured_witness_nodes(chain, core):
    """Psyche (witness_nodes = 0) took the quorum of whoever submitted, so one witness could carry a
    round. Here one witness of three configured decides nothing and ends the epoch; two that agree (a
    strict majority of the seats) decide the step and carry the round; witness_nodes = 0 is no config."""
    config = make_config(6)  # witness_nodes 3: quorum 2
    authority, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(6)]
    start_epoch(chain, run, members, config)
    step = chain.state(run)["progress"]["step"]
    chosen = list(elected(chain, core, run).items())
    assert len(chosen) == 3 and core.quorum(3) == 2
    snapshot = chain.snapshot(run)
    outcome = {}
    for count in (1, 2):
        chain.restore(run, snapshot)
        for index, position in chosen[:count]:
            chain.call("witness", members[index], run, make_witness(index, position, step))
        if not chain.state(run)["seed_pending"]:  # not decided: the round runs out its time
            chain.advance(config["max_round_train_time"])
            chain.call("tick", members[0], run)
            chain.advance(config["round_witness_time"])
            chain.call("tick", members[0], run)
        start_pending_round(chain, run, members[0])
        state = chain.state(run)
        outcome[count] = (
            state["run_state"],
            state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["decided"],
        )
    assert outcome == {
        1: ("Cooldown", False),
        2: ("RoundTrain", False),
    }  # a new round: nothing decided yet

    chain.call("set_paused", authority, run, {"paused": True})
    play_round(chain, core, run, members)
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Paused"
    progress = {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
    args = {"config": make_config(6, witness_nodes=0), "progress": progress}
    assert chain.fails("update_config", authority, run, args) == "ConfigInvalid"


def test_checkpoint_only_by_designated_checkpointers_with_weights_hash(chain):
    """Psyche let any epoch member point every joiner at any repo, with no hash of the weights. Only a
    designated checkpointer moves the repo here, and the weights' hash is not its to set: it is what the
    epoch's finishers voted (test_weights_votes.py)."""
    config = make_config(2)
    authority, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(2)]
    start_epoch(chain, run, members, config)
    weights = hashlib.sha256(b"model.safetensors").digest()
    pointer = {
        "kind": "Hub",
        "step": 1,
        "repo": b"mallory/backdoor",
        "revision": b"",
        "weights_sha256": weights,
    }
    assert chain.fails("checkpoint", members[0], run, {"checkpoint": pointer}) == "NotACheckpointer"
    keeper = chain.wallet()
    checkpointers = [keeper.pubkey(), *[Pubkey.default()] * 7]
    chain.call("set_checkpointers", authority, run, {"checkpointers": checkpointers})
    pointer["repo"] = b"cohort/llama-20m-mirror"
    chain.call("checkpoint", keeper, run, {"checkpoint": pointer})
    stored = chain.state(run)["model"]["checkpoint"]
    assert stored["repo"].rstrip(b"\0") == b"cohort/llama-20m-mirror"
    assert (
        stored["weights_sha256"] == bytes(32) and stored["step"] == 0
    )  # not the checkpointer's claim


def full_run(chain):
    config = make_config(256, min_clients=2, witness_nodes=3, global_batch_size_start=256,
                         global_batch_size_end=256, init_min_clients=250)  # fmt: skip
    return config, *open_run(chain, config)


def test_exit_run_frees_a_slot_in_a_full_registry(chain):
    """Psyche had no exit instruction and a registry that never shrank: after 256 distinct wallets
    nobody new could join. Here 250 training members and 6 pending joins fill the registry; nobody can
    be pruned (RegistryFull) until a member exits."""
    config, _, run = full_run(chain)
    members = [chain.wallet() for _ in range(250)]
    begin_warmup(chain, run, members, config)
    chain.advance(config["warmup_time"])
    chain.call("tick", members[0], run)
    assert start_pending_round(chain, run, members[0])
    assert chain.state(run)["run_state"] == "RoundTrain"
    for _ in range(6):
        chain.join(chain.wallet(), run)
    assert chain.state(run)["registry_len"] == 256
    newcomer = chain.wallet()
    assert chain.join_fails(newcomer, run) == "RegistryFull"
    chain.call("exit_run", members[17], run)
    assert chain.state(run)["registry_len"] == 255
    chain.join(newcomer, run)
    state = chain.state(run)
    assert state["registry_len"] == 256 and state["registry"][255]["signer"] == newcomer.pubkey()


def test_full_registry_is_pruned_of_wallets_that_left(chain):
    """A full registry reuses the slot of the wallet whose last join is the oldest, never a pending one."""
    _, authority, run = full_run(chain)
    wallets = [chain.wallet() for _ in range(256)]

    def new_join_round():  # pause and resume: every earlier join is void
        chain.call("set_paused", authority, run, {"paused": True})
        chain.call("set_paused", authority, run, {"paused": False})

    for wallet in wallets[:128]:
        chain.join(wallet, run)
    new_join_round()
    for wallet in [*wallets[128:], wallets[0]]:  # wallets[0] joins again: its join is newer
        chain.join(wallet, run)
    new_join_round()
    state = chain.state(run)
    assert state["registry_len"] == 256 and state["run_state"] == "WaitingForMembers"

    first, second = chain.wallet(), chain.wallet()
    chain.join(first, run)  # replaces wallets[1], the oldest; the last entry moves into its slot
    chain.join(second, run)  # then wallets[2]
    signers = [e["signer"] for e in chain.state(run)["registry"]]
    assert len(signers) == 256
    assert wallets[1].pubkey() not in signers and wallets[2].pubkey() not in signers
    assert signers[0] == wallets[0].pubkey()
    assert signers[1] == wallets[255].pubkey() and signers[2] == first.pubkey()
    assert signers[255] == second.pubkey()


def test_witness_transaction_fits_in_one_packet(chain, core):
    """Psyche's 1024-bit Bloom filters left ~160 bytes of headroom; an exact participant bitmap, a results
    root and a weights digest take less, and the whole witness transaction (even with a separate fee
    payer) fits in 1,232 bytes with room to spare."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    step = chain.state(run)["progress"]["step"]
    index, position = next(iter(elected(chain, core, run).items()))
    witness = make_witness(index, position, step)
    ix = chain.call_ix("witness", members[index], run, witness)
    tx = Transaction([chain.payer, members[index]], Message([ix], chain.payer.pubkey()),
                     chain.svm.latest_blockhash())  # fmt: skip
    assert len(bytes(tx)) <= 600
    chain.call("witness", members[index], run, witness)  # and the program takes it


def test_results_are_attested_exactly(chain, core):
    """Psyche's witnesses broadcast 1024-bit Bloom filters of the results they received: ~31% false
    positives at 256 clients, so a result nobody held could pass. A record here names the exact results
    list it holds (sha256 of its sorted (trainer, commitment) pairs): two records that differ in a single
    commitment never count together, and a step is decided only when a strict majority holds one list."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    step = chain.state(run)["progress"]["step"]
    (a, pa), (b, pb), (c, pc) = elected(chain, core, run).items()
    root = hashlib.sha256(b"one results list").digest()
    almost = root[:-1] + bytes([root[-1] ^ 1])  # the same list but for one commitment
    chain.call("witness", members[a], run, make_witness(a, pa, step, root=root))
    chain.call("witness", members[b], run, make_witness(b, pb, step, root=almost))
    state = chain.state(run)
    assert (
        not state["seed_pending"]
        and not state["epoch"]["rounds"][state["epoch"]["rounds_head"]]["decided"]
    )
    chain.call("witness", members[c], run, make_witness(c, pc, step, root=root))
    state = chain.state(run)
    round_ = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
    assert round_["decided"] and round_["decided_root"] == root and round_["decided_votes"] == 2
