"""Compute units of every coordinator instruction at 32 and 256 clients, account size and rent, and the
witness transaction's size. Run: .venv/bin/python benchmarks/coordinator/compute_units.py

Each instruction must stay under the default 200,000 CU so clients never need a compute-budget
instruction. The figures are exact (LiteSVM meters like a validator), so one run suffices.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from support.coordinator_chain import Chain, make_config, make_model

from cohort.sbf import build
from cohort.sdk.coordinator_core import CoordinatorCore, load_idl

LIMIT = 200_000


def measure(clients: int, elf: bytes, core: CoordinatorCore) -> dict[str, int]:
    chain = Chain(elf, core.idl)
    units: dict[str, int] = {}

    def record(name: str, result) -> None:
        units[name] = max(units.get(name, 0), result.compute_units_consumed())

    authority = chain.wallet()
    run = chain.create_run(authority)
    record("initialize_run (+ createAccount)", chain.last_result)
    config = make_config(clients, witness_nodes=min(32, clients // 2),
                         global_batch_size_start=clients, global_batch_size_end=2 * clients)  # fmt: skip
    record("update_config", chain.call("update_config", authority, run,
           {"config": config, "progress": {"epoch": 0, "step": 1, "epoch_start_data_index": 0}}))  # fmt: skip
    record("update_model", chain.call("update_model", authority, run, {"model": make_model()}))
    record("update_metadata", chain.call("update_metadata", authority, run, {"metadata": {
        "name": b"bench", "description": b"x" * 200, "client_version": b"1", "num_parameters": 1, "vocab_size": 2}}))  # fmt: skip
    checkpointer = chain.wallet()
    record("set_checkpointers", chain.call("set_checkpointers", authority, run,
           {"checkpointers": [checkpointer.pubkey()] + [Pubkey.default()] * 7}))  # fmt: skip
    record("set_paused (resume)", chain.call("set_paused", authority, run, {"paused": False}))
    grantee = chain.wallet(1).pubkey()
    grant = {"join_authority": authority.pubkey(), "run": run,
             "authorization": chain.join_authorization_address(run, grantee)}  # fmt: skip
    record("set_join_authorization", chain.send(
        [chain.ix("set_join_authorization", grant, {"grantee": grantee, "allowed": True})], [authority]))  # fmt: skip
    members = [chain.wallet(1) for _ in range(clients)]
    for wallet in members:
        record("join_run", chain.join(wallet, run))
    chain.advance(config["waiting_for_members_extra_time"])
    record("tick (start epoch)", chain.call("tick", members[0], run))

    def start_round() -> None:
        """The round's inputs froze in the previous slot: a tick now starts it with its seed."""
        chain.next_slot()
        record("tick (start round: seed)", chain.call("tick", members[0], run))

    for index in range(config["witness_nodes"]):
        record(
            "warmup_witness", chain.call("warmup_witness", members[index], run, {"index": index})
        )
    start_round()

    def play_round(participants: bytes) -> None:
        state = chain.state(run)
        step = state["progress"]["step"]
        round_ = core.round_bytes(chain.run_bytes(run)[8:])
        elected = [(index, wallet, core.witness_position(round_, index)) for index, wallet in enumerate(members)]
        elected = [e for e in elected if e[2] is not None and e[2] < config["witness_nodes"]]
        chain.advance(config["round_witness_time"])  # the round's training takes time
        for k, (index, wallet, position) in enumerate(elected):
            args = {"step": step, "index": index, "position": position, "participants": participants,
                    "bloom_salt": 1, "broadcast_bloom": b"\xff" * 512,
                    "metadata": {"loss": 1.0, "tokens_per_sec": 1.0, "bytes_sent": 1, "bytes_received": 1,
                                 "eval_loss": 1.0, "eval_tokens": 1}}  # fmt: skip
            last = k == len(elected) - 1  # the last elected witness ends the round and freezes its inputs
            record("witness (last: ends round)" if last else "witness", chain.call("witness", wallet, run, args))
        start_round()

    everyone = b"\xff" * 32
    missing_last = bytearray(everyone)
    missing_last[(clients - 1) // 8] &= ~(1 << ((clients - 1) % 8)) & 0xFF
    play_round(everyone)
    play_round(everyone)
    play_round(
        bytes(missing_last)
    )  # round 2's witnesses did not see the last client's round-1 result
    health = {"count": 1, "indices": [clients - 1] + [0] * 31}
    record("health_check", chain.call("health_check", members[0], run, health))
    checkpoint = {
        "kind": "Hub",
        "step": 3,
        "repo": b"org/model",
        "revision": b"main",
        "weights_sha256": b"\1" * 32,
    }
    record("checkpoint", chain.call("checkpoint", checkpointer, run, {"checkpoint": checkpoint}))
    chain.advance(config["max_round_train_time"])
    record("tick (round timeout)", chain.call("tick", members[0], run))
    record("exit_run", chain.call("exit_run", members[1], run))
    record("set_paused (pause)", chain.call("set_paused", authority, run, {"paused": True}))
    chain.advance(config["round_witness_time"])
    record("tick (end round -> cooldown)", chain.call("tick", members[0], run))
    chain.advance(config["cooldown_time"])
    record("tick (end epoch)", chain.call("tick", members[0], run))
    state = chain.state(run)
    assert state["run_state"] == "Paused"
    for entry in state["registry"][: state["registry_len"]]:
        entry["earned"] = 5  # the last round had no witnesses, so nobody earned: give them points to move
    chain.write_run(run, state)
    record("claim_points (creates Points)", chain.call("claim_points", members[2], run))
    record("exit_run (creates Points)", chain.call("exit_run", members[3], run))
    record("close_join_authorization", chain.send([chain.ix("close_join_authorization", grant)], [authority]))
    index_key = chain.run_index_address(b"test-run")
    record(
        "close_run",
        chain.call("close_run", authority, run, run_index=index_key, recipient=authority.pubkey()),
    )
    return units


def witness_transaction_size(idl) -> int:
    payer, run = Keypair(), Keypair().pubkey()
    args = {"step": 1, "index": 0, "position": 0, "participants": bytes(32), "bloom_salt": 0,
            "broadcast_bloom": bytes(512), "metadata": {"loss": 0.0, "tokens_per_sec": 0.0, "bytes_sent": 0, "bytes_received": 0, "eval_loss": 0.0, "eval_tokens": 0}}  # fmt: skip
    ix = idl.instruction("witness", {"user": payer.pubkey(), "run": run}, args)
    from solders.hash import Hash

    return len(bytes(Transaction([payer], Message([ix], payer.pubkey()), Hash.default())))


def main() -> None:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    elf = program.so_path.read_bytes()
    core = CoordinatorCore(idl=load_idl())
    results = {n: measure(n, elf, core) for n in (32, 256)}
    names = list(results[256])
    print(f"{'instruction':<30} {'CU @32 clients':>15} {'CU @256 clients':>16}")
    worst = 0
    for name in names:
        a, b = results[32].get(name, 0), results[256][name]
        worst = max(worst, a, b)
        print(f"{name:<30} {a:>15,} {b:>16,}")
    idl = core.idl
    size = idl.account_size("Run")
    rent = Chain(elf, idl).svm.minimum_balance_for_rent_exemption(size)
    print(f"\nRun account: {size:,} bytes, rent-exempt minimum {rent / 1e9:.4f} SOL")
    print(f"RunIndex account: {idl.account_size('RunIndex')} bytes")
    print(f"witness transaction: {witness_transaction_size(idl)} bytes (limit 1,232)")
    print(f"program: {len(elf):,} bytes")
    print(
        f"largest instruction: {worst:,} CU ({'within' if worst < LIMIT else 'OVER'} the default {LIMIT:,})"
    )


if __name__ == "__main__":
    main()
