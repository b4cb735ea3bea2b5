"""One test per weak point of Psyche's coordinator that this program fixes (psyche-reference §6), each
showing on chain that the Psyche behaviour is gone."""

from __future__ import annotations

import ctypes
import hashlib
import random

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
CONFIG = make_config(CLIENTS)  # min_clients 2, witness_nodes 2


def test_witness_is_bound_to_its_step(chain, core):
    """Psyche's witness carried no step: a stale one counted wherever its position matched. A witness
    replayed from the previous round is refused even at an index and position elected now."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    old_step = chain.state(run)["progress"]["step"]
    play_round(chain, core, run, members)
    for index, position in elected(chain, core, run).items():
        stale = make_witness(index, position, old_step)
        assert chain.fails("witness", members[index], run, stale) == "WrongStep"
        chain.call("witness", members[index], run, make_witness(index, position, old_step + 1))


def test_warmup_witness_index_must_be_the_senders_own(chain):
    """Psyche accepted any index: one client could send every warmup witness and start training early."""
    config = make_config(CLIENTS, witness_nodes=2)
    _, run = open_run(chain, config)
    members = [chain.wallet() for _ in range(CLIENTS)]
    begin_warmup(chain, run, members, config)
    chain.call("warmup_witness", members[0], run, {"index": 0})
    for index in (1, 2, 3):
        assert chain.fails("warmup_witness", members[0], run, {"index": index}) == "InvalidWitness"
    assert chain.state(run)["run_state"] == "Warmup"
    chain.call("warmup_witness", members[2], run, {"index": 2})
    assert start_pending_round(chain, run, members[0])
    assert chain.state(run)["run_state"] == "RoundTrain"


def test_quorum_is_relative_to_the_configured_witness_nodes(chain, core):
    """Psyche (witness_nodes = 0) took the quorum of whoever submitted, so one witness could carry a
    round. Here one witness of three configured ends the epoch; two (the quorum) carry the round; and
    witness_nodes = 0 is not a valid config."""
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
        chain.advance(config["max_round_train_time"])
        chain.call("tick", members[0], run)
        chain.advance(config["round_witness_time"])
        chain.call("tick", members[0], run)
        start_pending_round(chain, run, members[0])
        outcome[count] = chain.state(run)["run_state"]
    assert outcome == {1: "Cooldown", 2: "RoundTrain"}

    chain.call("set_paused", authority, run, {"paused": True})
    play_round(chain, core, run, members)
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "Paused"
    progress = {"epoch": 0, "step": 1, "epoch_start_data_index": 0}
    args = {"config": make_config(6, witness_nodes=0), "progress": progress}
    assert chain.fails("update_config", authority, run, args) == "ConfigInvalid"


def test_checkpoint_only_by_designated_checkpointers_with_weights_hash(chain):
    """Psyche let any epoch member point every joiner at any repo, with no hash of the weights."""
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
    pointer["repo"] = b"cohort/llama-20m"
    chain.call("checkpoint", keeper, run, {"checkpoint": pointer})
    stored = chain.state(run)["model"]["checkpoint"]
    assert (
        stored["repo"].rstrip(b"\0") == b"cohort/llama-20m" and stored["weights_sha256"] == weights
    )


def full_run(chain):
    config = make_config(256, min_clients=1, witness_nodes=1, global_batch_size_start=256,
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
    """Psyche's 1024-bit Bloom filters left ~160 bytes of headroom; ours are 4096 bits plus an exact
    participant bitmap, and the whole witness transaction (even with a separate fee payer) still fits
    in 1,232 bytes."""
    _, run = open_run(chain, CONFIG)
    members = [chain.wallet() for _ in range(CLIENTS)]
    start_epoch(chain, run, members, CONFIG)
    step = chain.state(run)["progress"]["step"]
    index, position = next(iter(elected(chain, core, run).items()))
    witness = make_witness(index, position, step)
    ix = chain.call_ix("witness", members[index], run, witness)
    tx = Transaction([chain.payer, members[index]], Message([ix], chain.payer.pubkey()),
                     chain.svm.latest_blockhash())  # fmt: skip
    assert len(bytes(tx)) <= 1232
    chain.call("witness", members[index], run, witness)  # and the program takes it


def test_bloom_false_positive_rate_at_the_client_cap(core):
    """Psyche's 1024-bit, 8-hash filter: ~31% false positives at 256 clients. Ours (the same code as the
    program's): at most 0.1%."""
    rng = random.Random(3)
    bloom = ctypes.create_string_buffer(512)
    salt = ctypes.c_uint64(rng.getrandbits(64))
    items = [rng.randbytes(32) for _ in range(256)]
    for item in items:
        core.lib.coord_bloom_insert(bloom, salt, item)
    assert all(core.lib.coord_bloom_contains(bloom, salt, item) for item in items)
    trials = 50_000
    false = sum(
        core.lib.coord_bloom_contains(bloom, salt, rng.randbytes(32)) for _ in range(trials)
    )
    assert false / trials <= 0.001
