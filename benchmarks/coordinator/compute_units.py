"""Compute units of every coordinator instruction at 32 and 256 clients (16 and 32 witness seats), account
sizes and rent, and the witness transaction's size. Run: .venv/bin/python benchmarks/coordinator/compute_units.py

Each instruction must stay under the default 200,000 CU so clients never need a compute-budget
instruction. The figures are exact (LiteSVM meters like a validator), so one run suffices; instructions
that create an account vary by a few thousand CU with the PDA's bump search.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction
from support.coordinator_chain import SLOT_HASHES_MAX, Chain, make_config, make_model

from cohort.sbf import build
from cohort.sdk.coordinator_core import CoordinatorCore, load_idl
from cohort.sdk.statements import ed25519_verify_instruction, result_statement

LIMIT = 200_000
METADATA = {"loss": 1.0, "tokens_per_sec": 1.0, "bytes_sent": 1, "bytes_received": 1, "eval_loss": 1.0,
            "eval_tokens": 1}  # fmt: skip


def measure(clients: int, elf: bytes, core: CoordinatorCore) -> dict[str, int]:
    chain = Chain(elf, core.idl)
    units: dict[str, int] = {}

    def record(name: str, result) -> None:
        units[name] = max(units.get(name, 0), result.compute_units_consumed())

    authority = chain.wallet()
    run = chain.create_run(authority)
    record("initialize_run (+ createAccount)", chain.last_result)
    seats = min(32, clients // 2)
    config = make_config(clients, witness_nodes=seats, global_batch_size_start=clients,
                         global_batch_size_end=2 * clients, verification_percent=100)  # fmt: skip
    quorum = core.quorum(seats)
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
    node_keys = [Keypair() for _ in range(clients)]
    for wallet, node in zip(members, node_keys, strict=True):
        record(
            "join_run (creates Endpoint)",
            chain.join(wallet, run, node, endpoint=b"203.0.113.7:4433"),
        )
    chain.advance(config["waiting_for_members_extra_time"])
    record("tick (start epoch)", chain.call("tick", members[0], run))

    def start_round() -> None:
        """A round that waits for its seed (Warmup's end, a re-freeze): a tick a slot later starts it."""
        if not chain.state(run)["seed_pending"]:
            return  # the decision started the next round itself, or ended the epoch
        chain.next_slot()
        record("tick (start round: seed)", chain.call("tick", members[0], run))

    def seated() -> list[tuple[int, int]]:
        data, states = chain.run_bytes(run)[8:], chain.state(run)["clients"]
        found = [
            (i, core.witness_seat(data, i))
            for i in range(clients)
            if states[i]["state"] == "Healthy"
        ]
        return sorted(((i, p) for i, p in found if p is not None), key=lambda e: e[1])

    def witness(index: int, position: int, participants: bytes, root: bytes):
        args = {"step": chain.state(run)["progress"]["step"], "index": index, "position": position,
                "participants": participants, "results_root": root, "weights_digest": 7, "metadata": METADATA}  # fmt: skip
        return chain.call("witness", members[index], run, args)

    for index in range(seats):
        record(
            "warmup_witness", chain.call("warmup_witness", members[index], run, {"index": index})
        )
    start_round()

    everyone = b"\xff" * 32
    missing_last = bytearray(everyone)
    missing_last[(clients - 1) // 8] &= ~(1 << ((clients - 1) % 8)) & 0xFF

    def decided_round(participants: bytes) -> None:
        """A strict majority of the seats reports one root: the last of them decides and ends the round."""
        chain.advance(config["round_witness_time"])  # the round's training takes time
        for k, (index, position) in enumerate(seated()[:quorum]):
            result = witness(index, position, participants, b"\x01" * 32)
            record(
                "witness (decides: ends the round, starts the next)"
                if k == quorum - 1
                else "witness",
                result,
            )
        start_round()

    decided_round(everyone)  # height 0
    # height 1: every seat a different root (the most records to count); one replaces its own; no
    # decision, so the round times out; its witnesses did not see the last client's round-0 result
    chain.advance(config["round_witness_time"])
    for k, (index, position) in enumerate(seated()):
        record(
            "witness (full seats, no majority)",
            witness(index, position, bytes(missing_last), bytes([k + 2]) * 32),
        )
    index, position = seated()[0]
    record(
        "witness (replaces its record)", witness(index, position, bytes(missing_last), b"\xee" * 32)
    )
    chain.advance(config["max_round_train_time"])
    record("tick (round timeout)", chain.call("tick", members[0], run))
    chain.advance(config["round_witness_time"])
    chain.slot += (
        SLOT_HASHES_MAX  # the round outlived what SlotHashes proves of the slot it began in
    )
    chain.next_slot()
    record("tick (ends a round: slot aged out, re-freeze)", chain.call("tick", members[0], run))
    start_round()

    # height 2: a health check, a checkpointer, an exit, an equivocation report; then a decided round
    health = {
        "step": chain.state(run)["progress"]["step"] - 2,
        "count": 1,
        "indices": [clients - 1] + [0] * 31,
    }
    record("health_check", chain.call("health_check", members[0], run, health))
    checkpoint = {
        "kind": "Hub",
        "step": 3,
        "repo": b"org/model",
        "revision": b"main",
        "weights_sha256": b"\1" * 32,
    }
    record("checkpoint", chain.call("checkpoint", checkpointer, run, {"checkpoint": checkpoint}))
    record("exit_run (closes Endpoint)", chain.call("exit_run", members[clients - 2], run))
    accused, step = clients - 3, chain.state(run)["progress"]["step"] - 1
    proofs = []
    for commitment in (b"\xa1" * 32, b"\xa2" * 32):
        message = result_statement(
            core.idl, run, chain.state(run)["epoch"]["epoch"], step, (0, 2), commitment
        )
        key = node_keys[accused]
        proofs.append(
            ed25519_verify_instruction(
                bytes(key.pubkey()), bytes(key.sign_message(message)), message
            )
        )
    statement = {"batch_start": 0, "batch_end": 2}
    args = {"index": accused, "step": step, "first": statement | {"commitment": b"\xa1" * 32},
            "second": statement | {"commitment": b"\xa2" * 32}}  # fmt: skip
    report = chain.call_ix("report_equivocation", members[0], run, args)
    record("report_equivocation (+ 2 Ed25519)", chain.send([*proofs, report], [members[0]]))
    # a round later, the seed of the next round draws the checks of the epoch's first step: two of a
    # trainer's three verifiers report, the second opens a dispute; two rounds later its committee's seed is
    # out and a strict majority of the committee convicts
    decided_round(everyone)
    state = chain.state(run)
    checked, data = state["epoch"]["start_step"], chain.run_bytes(run)[8:]
    seed = core.check_seed(data, checked)
    healthy = {i for i, c in enumerate(state["clients"][:clients]) if c["state"] == "Healthy"}
    trainer, verifiers = next((t, v) for t in sorted(healthy)
                              if set(v := core.check_plan(data, checked, seed, t)[:2]) <= healthy)  # fmt: skip
    for k, verifier in enumerate(verifiers):
        args = {"step": checked, "trainer": trainer, "reason": "PayloadMismatch"}
        result = chain.call("report_check", members[verifier], run, args)
        record("report_check (majority: opens a dispute)" if k else "report_check", result)
    decided_round(everyone)
    decided_round(everyone)
    committee = sorted(core.dispute_committee(chain.run_bytes(run)[8:], checked, trainer))
    needed = len(committee) // 2 + 1
    for k, member in enumerate(committee[:needed]):
        args = {"step": checked, "trainer": trainer, "reason": "PayloadMismatch"}
        result = chain.call("report_check", members[member], run, args)
        record(
            "report_check (dispute majority: convicts)"
            if k == needed - 1
            else "report_check (dispute)",
            result,
        )
    assert chain.state(run)["clients"][trainer]["state"] == "Convicted"
    chain.advance(
        config["epoch_time"]
    )  # the epoch is over: the next decision sets up one flush round
    decided_round(everyone)
    decided_round(everyone)  # the flush round: its decision ends the epoch (Cooldown)
    assert chain.state(run)["run_state"] == "Cooldown"

    # Cooldown: the healthy finishers vote on the epoch's weights
    state = chain.state(run)
    finishers = [i for i, c in enumerate(state["clients"][:clients]) if c["state"] == "Healthy"]
    votes = len(finishers) // 2 + 1
    for k, index in enumerate(finishers[:votes]):
        args = {"index": index, "step": state["progress"]["step"], "manifest": b"\x33" * 32}
        name = "vote_weights (majority: sets checkpoint)" if k == votes - 1 else "vote_weights"
        record(name, chain.call("vote_weights", members[index], run, args))
    chain.advance(config["cooldown_time"])
    record("tick (end epoch)", chain.call("tick", members[0], run))
    assert chain.state(run)["run_state"] == "WaitingForMembers"

    stranger = chain.wallet()
    record(
        "settle_points (creates Points)", chain.settle_points(stranger, run, members[2].pubkey())
    )
    record("claim_points (creates Points)", chain.call("claim_points", members[3], run))
    record("exit_run (creates Points, closes Endpoint)", chain.call("exit_run", members[4], run))
    record("set_paused (pause)", chain.call("set_paused", authority, run, {"paused": True}))
    state = chain.state(run)
    for entry in state["registry"][: state["registry_len"]]:
        if entry["earned"]:
            chain.settle_points(
                stranger, run, entry["signer"]
            )  # close_run refuses while points are unclaimed
    index_key = chain.run_index_address(b"test-run")
    record(
        "close_run",
        chain.call("close_run", authority, run, run_index=index_key, recipient=authority.pubkey()),
    )
    points = chain.points_address(run, members[2].pubkey())
    record(
        "close_points (after close_run)", chain.call("close_points", members[2], run, points=points)
    )
    record("close_join_authorization (after close_run)",
           chain.send([chain.ix("close_join_authorization", grant)], [authority]))  # fmt: skip
    return units


def witness_transaction_size(idl) -> int:
    payer, run = Keypair(), Keypair().pubkey()
    args = {"step": 1, "index": 0, "position": 0, "participants": bytes(32), "results_root": bytes(32),
            "weights_digest": 0, "metadata": METADATA}  # fmt: skip
    ix = idl.instruction("witness", {"user": payer.pubkey(), "run": run}, args)
    return len(bytes(Transaction([payer], Message([ix], payer.pubkey()), Hash.default())))


def main() -> None:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    elf = program.so_path.read_bytes()
    core = CoordinatorCore(idl=load_idl())
    results = {n: measure(n, elf, core) for n in (32, 256)}
    names = list(results[256])
    width = max(len(n) for n in names)
    print(f"{'instruction':<{width}} {'CU @32 clients':>15} {'CU @256 clients':>16}")
    worst = 0
    for name in names:
        a, b = results[32].get(name, 0), results[256][name]
        worst = max(worst, a, b)
        print(f"{name:<{width}} {a:>15,} {b:>16,}")
    idl = core.idl
    svm = Chain(elf, idl).svm
    size = idl.account_size("Run")
    hot = 8 + idl.offset_of("Run", "witnesses")
    print(f"\nRun account: {size:,} bytes (hot prefix {hot:,}), rent-exempt minimum "
          f"{svm.minimum_balance_for_rent_exemption(size) / 1e9:.4f} SOL")  # fmt: skip
    for name in ("RunIndex", "JoinAuthorization", "Points", "Endpoint"):
        account = idl.account_size(name)
        print(
            f"{name} account: {account} bytes, rent {svm.minimum_balance_for_rent_exemption(account) / 1e9:.5f} SOL"
        )
    print(f"witness transaction: {witness_transaction_size(idl)} bytes (limit 1,232)")
    print(f"program: {len(elf):,} bytes")
    print(
        f"largest instruction: {worst:,} CU ({'within' if worst < LIMIT else 'OVER'} the default {LIMIT:,})"
    )


if __name__ == "__main__":
    main()
