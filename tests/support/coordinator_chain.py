"""Test support: a LiteSVM chain with the coordinator deployed, wallets, time under the test's control,
and default run configurations."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

import pytest
from solders.account import Account
from solders.clock import Clock
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from solders.transaction import Transaction
from solders.transaction_metadata import FailedTransactionMetadata, TransactionMetadata

from cohort.sdk.coordinator_core import CoordinatorCore, Env
from cohort.sdk.idl import Idl
from cohort.sdk.statements import (
    ed25519_instruction,
    ed25519_verify_instruction,
    join_proof_message,
    result_statement,
)

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
SLOT_HASHES_MAX = 512  # entries the SlotHashes sysvar keeps


def hash_of_slot(slot: int) -> bytes:
    return hashlib.sha256(struct.pack("<Q", slot)).digest()


ALL_PARTICIPANTS = b"\xff" * 32  # a witness's participant bitmap that saw everyone

TIMING = {
    "warmup_time": 10,
    "cooldown_time": 10,
    "max_round_train_time": 20,
    "round_witness_time": 5,
    "epoch_time": 300,
    "global_batch_size_warmup_tokens": 0,
    "waiting_for_members_extra_time": 2,
}


def make_config(clients: int, **overrides: Any) -> dict[str, Any]:
    config = dict(TIMING)
    config.update(
        total_steps=1000,
        init_min_clients=clients,
        min_clients=max(2, clients // 2) if clients >= 3 else 1,
        witness_nodes=3 if clients >= 3 else 1,
        global_batch_size_start=max(clients, 8),
        global_batch_size_end=max(2 * clients, 16),
        join_policy="Open",
        max_share_ratio=4,
        verification_percent=0,
        pipeline_depth=2,
        conviction_ban_epochs=4,
        check_rate_kib=256,
    )
    config.update(overrides)
    return config


def make_model(**overrides: Any) -> dict[str, Any]:
    model = {
        "architecture": "HfLlama",
        "data_type": "Pretraining",
        "max_seq_len": 512,
        "cold_start_warmup_steps": 0,
        "preset": b"llama-20m",
        "checkpoint": {"kind": "Hub", "step": 0, "repo": b"cohort/llama-20m", "revision": b"", "weights_sha256": bytes(32)},
        "data_location": b"kjv",
        "lr_schedule": {"kind": "Cosine", "base_lr": 4e-4, "final_lr": 4e-5, "warmup_steps": 10, "stable_steps": 0, "total_steps": 1000},
        "optimizer": {"compression_decay": 0.999, "clip_grad_norm": 1.0, "weight_decay": 0.0, "compression_topk": 4,
                      "compression_chunk": 64, "quantize_1bit": True},
    }  # fmt: skip
    model.update(overrides)
    return model


class ProgramFailed(AssertionError):
    def __init__(self, err: object, logs: list[str], code: int | None, name: str | None) -> None:
        self.err, self.logs, self.code, self.name = err, logs, code, name
        super().__init__(f"{name or err}\n" + "\n".join(logs))


class Chain:
    """The coordinator in LiteSVM, a clock the test moves, and instruction sending by IDL name."""

    def __init__(self, elf: bytes, idl: Idl) -> None:
        self.svm = LiteSVM()
        self.idl = idl
        self.program_id = Keypair().pubkey()
        self.svm.add_program(self.program_id, elf)
        self.payer = Keypair()
        self.svm.airdrop(self.payer.pubkey(), 10_000 * 10**9)
        self.slot = 1000
        self.now = T0
        self.slot_history: list[tuple[int, bytes]] = []  # SlotHashes entries, newest first
        self._set_time()

    # -- time -----------------------------------------------------------------------------------------
    def slot_hash(self) -> bytes:
        """The latest SlotHashes entry (the previous slot's)."""
        return self.slot_history[0][1]

    def _set_time(self, slot_hash: bytes | None = None) -> None:
        """Clock and slot as the test set them; SlotHashes holds a block for every earlier slot (up to
        512, newest first), each slot's hash being sha256(slot) unless a test replaced it."""
        self.svm.warp_to_slot(self.slot)
        self.svm.set_clock(Clock(self.slot, T0, 0, 1, self.now))
        newest = self.slot_history[0][0] if self.slot_history else self.slot - 2
        newest = max(newest, self.slot - 1 - SLOT_HASHES_MAX)
        fresh = [(s, hash_of_slot(s)) for s in range(self.slot - 1, newest, -1)]
        self.slot_history = [e for e in fresh + self.slot_history if e[0] < self.slot][
            :SLOT_HASHES_MAX
        ]
        if slot_hash is not None:
            self.slot_history[0] = (self.slot_history[0][0], slot_hash)
        self.svm.set_slot_hashes(self.svm_slot_hashes())

    def svm_slot_hashes(self, replace: dict[int, bytes] | None = None) -> list[tuple[int, Hash]]:
        """The SlotHashes entries for LiteSVM, with some slots' hashes replaced (another fork's)."""
        if replace:
            self.slot_history = [(s, replace.get(s, h)) for s, h in self.slot_history]
        return [(s, Hash(h)) for s, h in self.slot_history]

    def set_slot_hash(self, slot_hash: bytes) -> None:
        """Same slot and clock, another latest SlotHashes entry (as another fork would have)."""
        self._set_time(slot_hash)

    def next_slot(self) -> None:
        """One slot later at the same unix time (slots are 400 ms; the clock has whole seconds)."""
        self.slot += 1
        self._set_time()

    def slot_hash_of(self, slot: int) -> bytes:
        return dict(self.slot_history)[slot]

    def advance(self, seconds: int) -> None:
        """Move chain time forward (and the slot, and the slot hash with it)."""
        self.now += seconds
        self.slot += max(1, seconds * 5 // 2)
        self._set_time()

    def env(self, run: Pubkey) -> Env:
        return Env(self.now, self.slot_hash(), run, self.slot, tuple(self.slot_history))

    # -- transactions ---------------------------------------------------------------------------------
    def send(self, instructions: Sequence, signers: Sequence[Keypair] = ()) -> TransactionMetadata:
        unique = {bytes(k.pubkey()): k for k in [self.payer, *signers]}
        tx = Transaction(
            list(unique.values()),
            Message(list(instructions), self.payer.pubkey()),
            self.svm.latest_blockhash(),
        )
        result = self.svm.send_transaction(tx)
        self.svm.expire_blockhash()
        if isinstance(result, FailedTransactionMetadata):
            code = _custom_code(result.err())
            known = self.idl.error(code) if code is not None else None
            raise ProgramFailed(
                result.err(), list(result.meta().logs()), code, known.name if known else None
            )
        return result

    def ix(self, name: str, accounts: dict[str, Pubkey], args: dict | None = None):
        return self.idl.instruction(name, accounts, args, program_id=self.program_id)

    def call(
        self, name: str, signer: Keypair, run: Pubkey, args: dict | None = None, **accounts: Pubkey
    ):
        """An instruction whose signer account (`user`, `authority`, `payer` or `wallet`) is `signer` and
        whose run is `run`."""
        return self.send([self.call_ix(name, signer, run, args, **accounts)], [signer])

    def call_ix(
        self, name: str, signer: Keypair, run: Pubkey, args: dict | None = None, **accounts: Pubkey
    ) -> Instruction:
        names = [a["name"] for a in self.idl.instructions[name]["accounts"]]
        keys = {"run": run, **accounts}
        for role in ("user", "authority", "payer", "wallet"):
            if role in names:
                keys[role] = signer.pubkey()
        if "points" in names and "points" not in keys:
            keys["points"] = self.points_address(run, signer.pubkey())
        if "endpoint" in names and "endpoint" not in keys:
            keys["endpoint"] = self.endpoint_address(run, signer.pubkey())
        return self.ix(name, keys, args)

    def fails(
        self, name: str, signer: Keypair, run: Pubkey, args: dict | None = None, **accounts: Pubkey
    ) -> str:
        """Expect a program error; returns its IDL name. The run's bytes must be unchanged."""
        return self.failure(name, signer, run, args, **accounts).name or "?"

    def failure(
        self, name: str, signer: Keypair, run: Pubkey, args: dict | None = None, **accounts: Pubkey
    ) -> ProgramFailed:
        """Like `fails`, but returns the whole failure (error name, code and logs)."""
        return self.send_fails([self.call_ix(name, signer, run, args, **accounts)], [signer], run)

    def send_fails(
        self, instructions: Sequence, signers: Sequence[Keypair], watch: Pubkey
    ) -> ProgramFailed:
        """Expect the transaction to fail, leaving the bytes of the account `watch` unchanged."""
        before = self.account_bytes(watch)
        with pytest.raises(ProgramFailed) as e:
            self.send(instructions, signers)
        assert self.account_bytes(watch) == before, "a failed instruction changed the account"
        return e.value

    # -- accounts -------------------------------------------------------------------------------------
    def wallet(self, sol: int = 10) -> Keypair:
        kp = Keypair()
        self.svm.airdrop(kp.pubkey(), sol * 10**9)
        return kp

    def run_index_address(self, run_id: bytes) -> Pubkey:
        return Pubkey.find_program_address([b"run", run_id], self.program_id)[0]

    def join_authorization_address(self, run: Pubkey, grantee: Pubkey) -> Pubkey:
        seeds = [b"join", bytes(run), bytes(grantee)]
        return Pubkey.find_program_address(seeds, self.program_id)[0]

    def points_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        return Pubkey.find_program_address([b"points", bytes(run), bytes(wallet)], self.program_id)[
            0
        ]

    def endpoint_address(self, run: Pubkey, wallet: Pubkey) -> Pubkey:
        return Pubkey.find_program_address(
            [b"endpoint", bytes(run), bytes(wallet)], self.program_id
        )[0]

    def settle_points(self, payer: Keypair, run: Pubkey, wallet: Pubkey) -> TransactionMetadata:
        """settle_points of `wallet`'s unclaimed points, sent and paid for by `payer` (anyone)."""
        return self.call(
            "settle_points", payer, run, {"wallet": wallet}, points=self.points_address(run, wallet)
        )

    def points(self, run: Pubkey, wallet: Pubkey) -> int | None:
        """Claimed points in the wallet's Points account (None: no account)."""
        data = self.account_bytes(self.points_address(run, wallet))
        return None if not data else self.idl.decode_account("Points", data)["points"]

    def create_run(
        self, authority: Keypair, run_id: bytes = b"test-run", join_authority: Pubkey | None = None
    ) -> Pubkey:
        run = Keypair()
        size = self.idl.account_size("Run")
        lamports = self.svm.minimum_balance_for_rent_exemption(size)
        create = create_account(
            CreateAccountParams(from_pubkey=self.payer.pubkey(), to_pubkey=run.pubkey(), lamports=lamports,
                                space=size, owner=self.program_id)
        )  # fmt: skip
        init = self.ix(
            "initialize_run",
            {"payer": self.payer.pubkey(), "authority": authority.pubkey(), "run": run.pubkey(),
             "run_index": self.run_index_address(run_id)},
            {"run_id": run_id, "join_authority": join_authority or authority.pubkey()},
        )  # fmt: skip
        self.last_result = self.send([create, init], [run, authority])
        return run.pubkey()

    def open_run(
        self, authority: Keypair, run: Pubkey, config: dict, model: dict | None = None
    ) -> None:
        self.call(
            "update_config",
            authority,
            run,
            {"config": config, "progress": {"epoch": 0, "step": 1, "epoch_start_data_index": 0}},
        )
        self.call("update_model", authority, run, {"model": model or make_model()})
        self.call("set_paused", authority, run, {"paused": False})

    def run_bytes(self, run: Pubkey) -> bytes:
        return bytes(self.svm.get_account(run).data)

    def account_bytes(self, address: Pubkey) -> bytes | None:
        account = self.svm.get_account(address)
        return None if account is None else bytes(account.data)

    def put_account(self, address: Pubkey, data: bytes, owner: Pubkey | None = None) -> None:
        """Store an account as is (rent-exempt), owned by the program unless told otherwise."""
        lamports = self.svm.minimum_balance_for_rent_exemption(len(data))
        self.svm.set_account(address, Account(lamports, data, owner or self.program_id))

    def write_run(self, run: Pubkey, state: dict[str, Any]) -> None:
        """Overwrite the Run account with an edited decoded state (for states too costly to reach)."""
        body = self.idl.encode({"defined": {"name": "Run"}}, state)
        self.put_account(run, self.idl.accounts["Run"] + body)

    def snapshot(self, run: Pubkey) -> tuple[bytes, int, int]:
        """The run's bytes and the chain's time, to replay what follows under other conditions."""
        return self.run_bytes(run), self.now, self.slot

    def restore(self, run: Pubkey, snapshot: tuple[bytes, int, int]) -> None:
        data, self.now, self.slot = snapshot
        self.put_account(run, data)
        self.slot_history = []
        self._set_time()

    def state(self, run: Pubkey) -> dict[str, Any]:
        return self.idl.decode_account("Run", self.run_bytes(run))

    def join_ixs(
        self,
        wallet: Keypair,
        run: Pubkey,
        node_key: Keypair | None = None,
        authorization: Pubkey | None = None,
        endpoint: bytes = b"",
        throughput: int = 0,
    ) -> list[Instruction]:
        """The node key's Ed25519 proof of possession, then join_run (a fresh node key unless given).
        `throughput` (tokens/s) sets the member's share of each batch; 0 counts as the median."""
        node_key = node_key or Keypair()
        marker = self.state(run)["next_active"]
        proof = ed25519_instruction(
            node_key, join_proof_message(self.idl, run, wallet.pubkey(), marker)
        )
        args = {"p2p_identity": node_key.pubkey(), "endpoint": endpoint, "throughput": throughput}
        join = self.call_ix("join_run", wallet, run, args, authorization=authorization or run)
        return [proof, join]

    def join(self, wallet: Keypair, run: Pubkey, node_key: Keypair | None = None, **join: Any):
        """A proven join (join_ixs) that must succeed."""
        return self.send(self.join_ixs(wallet, run, node_key, **join), [wallet])

    def join_fails(
        self, wallet: Keypair, run: Pubkey, node_key: Keypair | None = None, **join: Any
    ) -> str:
        """A proven join that the program refuses; returns the error's IDL name."""
        return (
            self.send_fails(self.join_ixs(wallet, run, node_key, **join), [wallet], run).name or "?"
        )


def _custom_code(err: object) -> int | None:
    text = str(err)
    if "Custom(" not in text:
        return None
    return int(text.split("Custom(")[1].split(")")[0])


# --------------------------------------------------------------------------------------------------
# playing a run the way honest clients do


def bitmap(indices: Sequence[int]) -> bytes:
    """A 256-bit client bitmap with the given epoch indices set."""
    out = bytearray(32)
    for i in indices:
        out[i // 8] |= 1 << (i % 8)
    return bytes(out)


LCG_A, LCG_C = 6364136223846793005, 1442695040888963407  # Psyche's LCG


def witness_order(seed: int, mask: bytes) -> list[int]:
    """The witness order of a round with this seed and these trainers, written out independently of the C
    code: a Fisher-Yates shuffle of the trainers (in index order) driven by the LCG, seeded by the first 8
    bytes of sha256(seed_le || "witness")."""
    out = [i for i in range(256) if mask[i // 8] >> (i % 8) & 1]
    state = int.from_bytes(
        hashlib.sha256(struct.pack("<Q", seed) + b"witness").digest()[:8], "little"
    )
    for i in range(len(out), 1, -1):
        state = (state * LCG_A + LCG_C) % 2**64
        j = (state * i) >> 64  # the high bits: the LCG's low bits have short periods
        out[i - 1], out[j] = out[j], out[i - 1]
    return out


def elected(chain: Chain, core: CoordinatorCore, run: Pubkey) -> dict[int, int]:
    """Epoch index -> seat (witness position) of this round's seated witnesses, in position order: the
    first witness_nodes positions of the round's witness order whose client is healthy or has witnessed."""
    data = chain.run_bytes(run)[8:]
    seats = {i: core.witness_seat(data, i) for i in range(chain.state(run)["epoch"]["clients_len"])}
    chosen = {i: p for i, p in seats.items() if p is not None}
    return dict(sorted(chosen.items(), key=lambda item: item[1]))


def results_root(participants: bytes) -> bytes:
    """The results root a witness holding `participants`' results reports in these tests: witnesses that
    hold the same results agree, and any difference in what they hold is another root."""
    return hashlib.sha256(b"results" + participants).digest()


def make_witness(
    index: int, position: int, step: int, participants: bytes = ALL_PARTICIPANTS, root: bytes | None = None,
    digest: int = 7,
) -> dict[str, Any]:  # fmt: skip
    return {
        "step": step,
        "index": index,
        "position": position,
        "participants": participants,
        "results_root": results_root(participants) if root is None else root,
        "weights_digest": digest,
        "metadata": {
            "loss": 3.5,
            "tokens_per_sec": 1000.0,
            "bytes_sent": 10,
            "bytes_received": 20,
            "eval_loss": 0.0,
            "eval_tokens": 0,
        },
    }


def witness_args(
    chain: Chain, core: CoordinatorCore, run: Pubkey, index: int, step: int
) -> dict | None:
    """The witness a client would send this round, or None when it holds no seat."""
    position = elected(chain, core, run).get(index)
    return None if position is None else make_witness(index, position, step)


ROUND_PHASES = ("RoundTrain", "RoundWitness")


def play_round(
    chain: Chain,
    core: CoordinatorCore,
    run: Pubkey,
    members: Sequence[Keypair],
    participants: bytes = ALL_PARTICIPANTS,
    all_elected: bool = True,
) -> int:
    """Seated healthy witnesses submit the same results root (`participants` as their bitmap) until a
    strict majority decides the step, which ends the round and (from a later slot than the round's start)
    starts the next; if too few can, the round times out into RoundWitness and, once the witness time
    passed, a tick ends it. A next round that waits for its seed starts a slot later. With all_elected,
    exactly a strict majority of the seats must have reported. Returns the number of witnesses."""
    state = chain.state(run)
    assert state["run_state"] == "RoundTrain"
    config, clients = state["config"], state["clients"]
    step = state["progress"]["step"]

    def over() -> bool:
        now = chain.state(run)
        return (
            now["seed_pending"]
            or now["progress"]["step"] != step
            or now["run_state"] not in ROUND_PHASES
        )

    chain.advance(config["round_witness_time"])  # training takes time (a round is never instant)
    submitted = 0
    for index, position in elected(chain, core, run).items():
        if over():
            break  # decided: the round is over
        if clients[index]["state"] != "Healthy":
            continue
        chain.call(
            "witness", members[index], run, make_witness(index, position, step, participants)
        )
        submitted += 1
    if all_elected:
        assert submitted == core.quorum(config["witness_nodes"])
    if not over() and chain.state(run)["run_state"] == "RoundTrain":
        chain.advance(config["max_round_train_time"])
        chain.call("tick", members[0], run)
        assert chain.state(run)["run_state"] == "RoundWitness"
    if not over():
        chain.advance(config["round_witness_time"])
        chain.call("tick", members[0], run)
    start_pending_round(chain, run, members[0])
    return submitted


def start_pending_round(chain: Chain, run: Pubkey, wallet: Keypair) -> bool:
    """When the round is over and the next waits for its seed (the round ended in the slot its inputs
    froze in), a tick one slot later starts it. Returns whether there was one."""
    if not chain.state(run)["seed_pending"]:
        return False
    chain.next_slot()
    chain.call("tick", wallet, run)
    return True


def begin_warmup(chain: Chain, run: Pubkey, members: Sequence[Keypair], config: dict,
                 node_keys: Sequence[Keypair] | None = None,
                 throughputs: Sequence[int] | None = None) -> None:  # fmt: skip
    """Everyone joins (with these node keys, else fresh ones, declaring these throughputs, else none) and,
    once the extra waiting time passed, a tick starts the epoch's Warmup."""
    for k, wallet in enumerate(members):
        chain.join(wallet, run, node_keys[k] if node_keys else None,
                   throughput=throughputs[k] if throughputs else 0)  # fmt: skip
    chain.advance(config["waiting_for_members_extra_time"])
    chain.call("tick", members[0], run)
    state = chain.state(run)
    assert state["run_state"] == "Warmup"
    assert state["epoch"]["clients_len"] == len(members)


def start_epoch(chain: Chain, run: Pubkey, members: Sequence[Keypair], config: dict,
                node_keys: Sequence[Keypair] | None = None) -> None:  # fmt: skip
    """Warmup begins, and the first witness_nodes members' warmup witnesses end it early."""
    begin_warmup(chain, run, members, config, node_keys)
    for index in range(config["witness_nodes"]):
        chain.call("warmup_witness", members[index], run, {"index": index})
    assert start_pending_round(chain, run, members[0])
    assert chain.state(run)["run_state"] == "RoundTrain"


def open_run(
    chain: Chain, config: dict, model: dict | None = None, **create: Any
) -> tuple[Keypair, Pubkey]:
    """A new run, configured and opened (WaitingForMembers). Returns (authority, run)."""
    authority = chain.wallet()
    run = chain.create_run(authority, **create)
    chain.open_run(authority, run, config, model)
    return authority, run


def play_epoch(chain: Chain, core: CoordinatorCore, run: Pubkey, wallets: Sequence[Keypair], config: dict,
               throughputs: Sequence[int] | None = None) -> None:  # fmt: skip
    """`wallets` join and play a whole epoch (rounds until it times out) to the next WaitingForMembers,
    so every healthy finisher earns points. Epoch indices follow the registry, not the order given."""
    begin_warmup(chain, run, wallets, config, throughputs=throughputs)
    by_key = {w.pubkey(): w for w in wallets}
    members = [by_key[c["signer"]] for c in chain.state(run)["clients"][: len(wallets)]]
    for index in range(config["witness_nodes"]):
        chain.call("warmup_witness", members[index], run, {"index": index})
    assert start_pending_round(chain, run, members[0])
    for _ in range(100):
        if chain.state(run)["run_state"] != "RoundTrain":
            break
        play_round(chain, core, run, members)
    assert chain.state(run)["run_state"] == "Cooldown"
    chain.advance(config["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "WaitingForMembers"


def equivocation(
    chain, run, key: Keypair, index: int, reporter: Keypair, step: int | None = None
) -> list[Instruction]:
    """The instructions of an equivocation report of client `index` (node key `key`): two results of one step
    (default: the last trained one) with different commitments, both signed, as anyone may send them."""
    state = chain.state(run)
    step = state["progress"]["step"] - 1 if step is None else step
    epoch = state["epoch"]["epoch"]
    ixs, statements = [], []
    for name in ("honest", "forged"):
        commitment = hashlib.sha256(name.encode()).digest()
        message = result_statement(chain.idl, run, epoch, step, (0, 4), commitment)
        ixs.append(
            ed25519_verify_instruction(
                bytes(key.pubkey()), bytes(key.sign_message(message)), message
            )
        )
        statements.append({"batch_start": 0, "batch_end": 4, "commitment": commitment})
    args = {"index": index, "step": step, "first": statements[0], "second": statements[1]}
    ixs.append(chain.call_ix("report_equivocation", reporter, run, args))
    return ixs


def by_index(chain: Chain, run: Pubkey, wallets: Sequence[Keypair]) -> list[Keypair]:
    """The wallets in epoch index order."""
    by_key = {w.pubkey(): w for w in wallets}
    state = chain.state(run)
    return [by_key[c["signer"]] for c in state["clients"][: state["epoch"]["clients_len"]]]


def check_plan(
    chain: Chain, core: CoordinatorCore, run: Pubkey, step: int, trainer: int
) -> tuple[int, ...]:
    """The epoch indices of the verifiers drawn to check `trainer`'s result of `step` (checkable now)."""
    data = chain.run_bytes(run)[8:]
    seed = core.check_seed(data, step)
    assert seed is not None, f"step {step} is not checkable now"
    return core.check_plan(data, step, seed, trainer)


def convict_by_dispute(
    chain: Chain,
    core: CoordinatorCore,
    run: Pubkey,
    members: Sequence[Keypair],
    step: int,
    trainer: int,
) -> list[tuple[str, dict]]:
    """A verification conviction the way the chain makes one: two of the check's verifiers report a payload
    mismatch (a dispute opens), two rounds later the committee is drawn, and a strict majority of it reports
    the same failure. `members` in epoch index order; returns the events of the report that convicted."""
    for verifier in check_plan(chain, core, run, step, trainer)[:2]:
        args = {"step": step, "trainer": trainer, "reason": "PayloadMismatch"}
        chain.call("report_check", members[verifier], run, args)
    for _ in range(2):
        play_round(chain, core, run, members, all_elected=False)
    committee = sorted(core.dispute_committee(chain.run_bytes(run)[8:], step, trainer))
    assert committee, "the dispute's committee is not drawn yet"
    for m in committee[: len(committee) // 2 + 1]:
        args = {"step": step, "trainer": trainer, "reason": "PayloadMismatch"}
        result = chain.call("report_check", members[m], run, args)
    return chain.idl.events_in_logs(list(result.logs()), chain.program_id)


def finish_epoch(
    chain: Chain, core: CoordinatorCore, run: Pubkey, members: Sequence[Keypair]
) -> None:
    """Rounds until the epoch times out (decided or not; a convicted seat stays empty), then its cooldown:
    WaitingForMembers. `members` in epoch index order."""
    for _ in range(100):
        if chain.state(run)["run_state"] != "RoundTrain":
            break
        play_round(chain, core, run, members, all_elected=False)
    state = chain.state(run)
    assert state["run_state"] == "Cooldown"
    chain.advance(state["config"]["cooldown_time"])
    chain.call("tick", members[0], run)
    assert chain.state(run)["run_state"] == "WaitingForMembers"
