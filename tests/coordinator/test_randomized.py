"""Randomized sequences of valid and invalid instructions from many wallets, with clock jumps: joins,
exits, ticks, warmup witnesses, witness records (a few results roots, so steps are decided, records
replaced and rounds time out), health checks, weights votes, points claims and settlements, equivocation
reports (with real signed statements on chain), failed-check reports by drawn verifiers (and by others),
join authorizations, checkpoints and pauses.

1. Against the host build of the core (thousands of steps): invariants after every step, and a failed
   operation never changes a byte.
2. The same generator against the on-chain program and the host core in lockstep: same result code, same
   events and identical Run bytes after every step — chain and host agree bit for bit.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from support.coordinator_chain import (
    Chain,
    ProgramFailed,
    make_config,
    make_model,
    play_epoch,
)

from cohort.sdk.coordinator_core import CoordinatorCore, Env, load_idl
from cohort.sdk.statements import ed25519_verify_instruction, result_statement

CONFIG = make_config(
    3,
    warmup_time=3,
    cooldown_time=3,
    max_round_train_time=4,
    round_witness_time=2,
    epoch_time=90,  # long enough for checks: the last step an epoch trains is never checkable
    waiting_for_members_extra_time=1,
    min_clients=2,
    witness_nodes=3,
    global_batch_size_start=6,
    global_batch_size_end=9,
    global_batch_size_warmup_tokens=512 * 40,
    total_steps=200,
    verification_percent=50,
)
SEED_DISPUTES = 1
NONCE_OFFSET = load_idl().offset_of("Run", "nonce")
NODE_KEYS = 10
ERROR_CODES = {e.name: code for code, e in load_idl().errors.items()}
ROOTS = [bytes([r]) * 32 for r in (1, 1, 1, 2, 3)]  # mostly one root: decisions; sometimes others
MANIFESTS = [bytes([m]) * 32 for m in (5, 5, 6)] + [bytes(32)]
COMMITMENTS = [bytes([c]) * 32 for c in (7, 8)]


@dataclass
class Op:
    name: str
    signer: int  # wallet index, -1 = authority
    args: dict = field(default_factory=dict)
    advance: int = 0


class Generator:
    """Mostly plausible operations (elected witnesses, members' indices) mixed with wrong ones."""

    def __init__(self, seed: int, twin: Twin, core: CoordinatorCore) -> None:
        self.rng = random.Random(seed)
        self.wallets = len(twin.wallets)
        self.wallet_keys = [w.pubkey() for w in twin.wallets]
        self.core = core
        self.node_keys = twin.node_keys
        self.last_check: tuple[int, int] | None = None  # (step, trainer) of the latest report_check
        self.reported: set[tuple[int, int, int]] = set()  # (step, trainer, verifier) drawn so far

    def next(self, state: dict, run_bytes: bytes) -> Op:
        rng = self.rng
        roll = rng.random()
        members = state["clients"][: state["epoch"]["clients_len"]]
        step = state["progress"]["step"]
        if (
            state["run_state"] in ("Cooldown", "WaitingForMembers")
            and members
            and rng.random() < 0.2
        ):
            roll = 0.89  # the epoch's finishers vote on its weights while they may
        if state["run_state"] in ("RoundTrain", "RoundWitness") and members and rng.random() < 0.25:
            roll = 0.6  # seats report (and replace) while the round lasts
        if (
            state["run_state"] in ("RoundTrain", "RoundWitness", "Cooldown")
            and members
            and rng.random() < 0.1
        ):
            return self._report_check(state, run_bytes, members)
        if roll < 0.22:  # 0 s: the next slot at the same unix time
            return Op("advance", 0, advance=rng.choice([0, 0, 1, 1, 2, 3, 5, 8, 40]))
        if roll < 0.36:
            return Op("tick", rng.randrange(self.wallets))
        if roll < 0.50:  # usually the wallet's own node key, sometimes another's (a taken identity)
            wallet = rng.randrange(self.wallets)
            node = wallet if rng.random() < 0.8 else rng.randrange(NODE_KEYS)
            endpoint = rng.choice(
                [b"", b"127.0.0.1:4433", b"x" * 160, b"127.0.0.1:4433", b"bad\x01"]
            )
            return Op("join_run", wallet, {"node": node, "endpoint": endpoint})
        if roll < 0.70 and members:
            index = rng.randrange(len(members))
            seat = self.core.witness_seat(run_bytes, index)
            participants = rng.choice(
                [b"\xff" * 32, bytes(32), bytes(rng.randrange(256) for _ in range(32))]
            )
            args = {
                "step": step + (rng.random() < 0.1),
                "index": index,
                "position": seat if seat is not None and rng.random() < 0.9 else rng.randrange(4),
                "participants": participants,
                "results_root": rng.choice(ROOTS),
                "weights_digest": rng.choice([7, 7, 8]),
                "metadata": {"loss": 2.5, "tokens_per_sec": 10.0, "bytes_sent": 1, "bytes_received": 2,
                             "eval_loss": 2.75, "eval_tokens": 4096},
            }  # fmt: skip
            return Op("witness", self._member_wallet(members, index, rng), args)
        if roll < 0.77 and members:
            index = rng.randrange(len(members))
            return Op("warmup_witness", self._member_wallet(members, index, rng), {"index": index})
        if roll < 0.80:
            return Op("exit_run", rng.randrange(self.wallets))
        if roll < 0.83 and members:
            k = rng.randrange(1, 3)
            indices = [rng.randrange(len(members)) for _ in range(k)]
            args = {
                "step": max(0, step - rng.choice([2, 2, 2, 1, 3, 4])),
                "count": k,
                "indices": indices + [0] * (32 - k),
            }
            return Op(
                "health_check", self._member_wallet(members, rng.randrange(len(members)), rng), args
            )
        if roll < 0.85:
            return Op("claim_points", rng.randrange(self.wallets))
        if roll < 0.87:  # anyone settles anyone's points, mostly of wallets that hold some
            owed = [self.wallet_keys.index(e["signer"]) for e in state["registry"][: state["registry_len"]]
                    if e["earned"] and e["signer"] in self.wallet_keys]  # fmt: skip
            wallet = (
                rng.choice(owed) if owed and rng.random() < 0.8 else rng.randrange(self.wallets)
            )
            return Op("settle_points", rng.randrange(self.wallets), {"wallet": wallet})
        if roll < 0.90 and members:
            index = rng.randrange(len(members))
            args = {
                "index": index,
                "step": step - (rng.random() < 0.1),
                "manifest": rng.choice(MANIFESTS),
            }
            return Op("vote_weights", self._member_wallet(members, index, rng), args)
        if roll < 0.915 and members:
            index = rng.randrange(len(members) + (rng.random() < 0.1))
            accused = members[min(index, len(members) - 1)]["p2p_identity"]
            own = next((k for k, key in enumerate(self.node_keys) if key.pubkey() == accused), 0)
            key = own if rng.random() < 0.8 else rng.randrange(NODE_KEYS)
            second = rng.choice(COMMITMENTS) if rng.random() < 0.2 else COMMITMENTS[1]
            return Op("report_equivocation", rng.randrange(self.wallets), {
                "index": index, "step": step - rng.choice([0, 1, 1, 1, 5]), "key": key,
                "first": {"batch_start": 0, "batch_end": 3, "commitment": COMMITMENTS[0]},
                "second": {"batch_start": 0, "batch_end": 3, "commitment": second}})  # fmt: skip
        if roll < 0.925:
            kind = rng.choice(["grant", "revoke", "close_join_authorization"])
            return Op(kind, -1, {"wallet": rng.randrange(self.wallets)})
        if roll < 0.97 or (
            roll < 0.995 and not state["pending_pause"]
        ):  # pauses are rare: rounds run
            checkpoint = {"kind": rng.choice(["Hub", "Gcs", "P2P"]), "step": step,
                          "repo": rng.choice([b"org/model", b"org/mirror"]), "revision": b"",
                          "weights_sha256": rng.randbytes(32)}  # fmt: skip
            return Op("checkpoint", rng.choice([0, -2]), {"checkpoint": checkpoint})
        return Op("set_paused", -1, {"paused": rng.random() < 0.5})

    def _report_check(self, state: dict, run_bytes: bytes, members: list) -> Op:
        """Mostly a drawn verifier of a checkable (step, trainer), often the check reported last (so a
        second verifier opens a dispute), or a member of an open dispute's committee (each dispute leaning
        to failures or to Passed, so its committee convicts the trainer or refutes the reporters); sometimes
        a step not checkable, a non-verifier or an outsider."""
        rng, step = self.rng, state["progress"]["step"]
        disputes = [(d["step"], d["trainer"]) for d in state["disputes"] if d["step"]]
        drawn = [
            d for d in disputes if self.core.dispute_committee(run_bytes, *d)
        ]  # its seed is out
        if disputes and rng.random() < 0.6:
            checked, trainer = rng.choice(drawn if drawn and rng.random() < 0.9 else disputes)
            committee = sorted(self.core.dispute_committee(run_bytes, checked, trainer))
            signer = (
                rng.choice(committee)
                if committee and rng.random() < 0.9
                else rng.randrange(len(members))
            )
            leaning = "Passed" if (checked + trainer) % 3 else "PayloadMismatch"
            reason = (
                leaning
                if rng.random() < 0.85
                else rng.choice(["Passed", "StateMismatch", "StateNotDelivered"])
            )
            return Op(
                "report_check", signer, {"step": checked, "trainer": trainer, "reason": reason}
            )
        steps = range(max(state["epoch"]["start_step"] - 1, step - 8), step + 1)
        checkable = [s for s in steps if self.core.check_seed(run_bytes, s) is not None]
        if self.last_check is not None and rng.random() < 0.5:
            checked, trainer = self.last_check
        else:
            checked = rng.choice(checkable if checkable and rng.random() < 0.8 else steps)
            trainer = rng.randrange(len(members) + (rng.random() < 0.05))
        seed = self.core.check_seed(run_bytes, checked)
        plan = self.core.check_plan(run_bytes, checked, seed, trainer) if seed is not None else ()
        if (
            plan and rng.random() < 0.9
        ):  # mostly a verifier that has not reported it yet (a quorum convicts)
            fresh = [v for v in plan if (checked, trainer, v) not in self.reported]
            signer = rng.choice(fresh if fresh and rng.random() < 0.8 else plan)
            self.reported.add((checked, trainer, signer))
            self.last_check = (checked, trainer)
        else:
            signer = self._member_wallet(members, rng.randrange(len(members)), rng)
        reason = rng.choice(
            ["PayloadMismatch", "StateMismatch", "StateNotDelivered", "ResultNotDelivered"]
        )
        return Op("report_check", signer, {"step": checked, "trainer": trainer, "reason": reason})

    def _member_wallet(self, members: list, index: int, rng: random.Random) -> int:
        # usually the member itself; sometimes someone else (must be rejected)
        return -3 if rng.random() < 0.1 else index


class Twin:
    """Wallets and their mapping to members, shared by the host and chain runs."""

    def __init__(self, chain: Chain, wallets: int) -> None:
        self.chain = chain
        self.authority = chain.wallet()
        self.checkpointer = chain.wallet()
        self.wallets = [chain.wallet() for _ in range(wallets)]
        self.outsider = Keypair()
        self.node_keys = [Keypair.from_seed(bytes([k + 1]) * 32) for k in range(NODE_KEYS)]
        self.authorizations: dict[
            int, bool
        ] = {}  # wallet index -> its JoinAuthorization's `allowed`
        self.claimed: dict[int, int] = {}  # wallet index -> points its Points account should hold
        self.endpoints: dict[
            int, tuple[int, bytes]
        ] = {}  # wallet index -> its Endpoint account's (node, address)

    def signer(self, op: Op, state: dict) -> Keypair:
        if op.signer == -1:
            return self.authority
        if op.signer == -2:
            return self.checkpointer
        if op.signer == -3:
            return self.outsider
        if op.name in ("witness", "warmup_witness", "health_check", "vote_weights", "report_check"):
            member = state["clients"][op.signer]["signer"]
            return next((w for w in self.wallets if w.pubkey() == member), self.outsider)
        return self.wallets[op.signer]


def host_apply(
    core: CoordinatorCore, run: bytearray, env: Env, op: Op, signer: Pubkey, twin: Twin
) -> int:
    """The host core's result for `op` (the program's own account checks emulated for the instructions
    whose only effect on the run is withdrawing a pending join). Bumps the nonce where the program does."""
    if op.name in ("grant", "revoke", "close_join_authorization"):
        return authorization_apply(core, run, op, twin)
    if op.name == "report_equivocation":
        code = equivocation_apply(core, run, env, op, twin)
        if code == 0:
            bump_nonce(run)
        return code
    owner = twin.wallets[op.args["wallet"]].pubkey() if op.name == "settle_points" else signer
    owner_index = op.args["wallet"] if op.name == "settle_points" else op.signer
    earned = registry_earned(core, run, owner)
    calls = {
        "tick": lambda: core.tick(run, env),
        "join_run": lambda: core.join(
            run, env, signer, twin.node_keys[op.args["node"]].pubkey(), op.args["endpoint"]
        ),
        "exit_run": lambda: core.exit(run, env, signer),
        "claim_points": lambda: core.claim_points(run, signer),
        "settle_points": lambda: core.settle_points(run, owner),
        "vote_weights": lambda: core.vote_weights(run, env, signer, op.args),
        "witness": lambda: core.witness(run, env, signer, op.args),
        "warmup_witness": lambda: core.warmup_witness(run, env, signer, op.args.get("index", 0)),
        "health_check": lambda: core.health_check(run, env, signer, op.args),
        "checkpoint": lambda: core.checkpoint(run, env, signer, op.args.get("checkpoint", {})),
        "report_check": lambda: core.report_check(run, env, signer, op.args),
        "set_paused": lambda: core.set_paused(run, env, op.args.get("paused", False)),
    }
    code = calls[op.name]()
    if op.name == "join_run":
        written = (op.args["node"], op.args["endpoint"])
        if code == ERROR_CODES["AlreadyJoined"] and twin.endpoints.get(op.signer) != written:
            twin.endpoints[op.signer] = written  # the program still updates the Endpoint account
            return 0
        if code == 0:
            twin.endpoints[op.signer] = written
    if op.name == "exit_run" and code == 0:
        twin.endpoints.pop(op.signer, None)  # closed
    if code == 0:
        bump_nonce(run)
        if op.name in ("exit_run", "claim_points", "settle_points") and earned:
            twin.claimed[owner_index] = twin.claimed.get(owner_index, 0) + earned
    return code


def equivocation_apply(core: CoordinatorCore, run: bytearray, env: Env, op: Op, twin: Twin) -> int:
    """The program's checks of report_equivocation, in its order (the signed statements are real on chain:
    the accused's node key, or another's), then the core's conviction."""
    state = core.idl.decode_account("Run", core.idl.accounts["Run"] + bytes(run))
    a = op.args
    if a["index"] >= state["epoch"]["clients_len"]:
        return ERROR_CODES["NotInEpoch"]
    if not state["epoch"]["start_step"] <= a["step"] <= state["progress"]["step"]:
        return ERROR_CODES["WrongStep"]
    if a["first"]["commitment"] == a["second"]["commitment"]:
        return ERROR_CODES["EquivocationNotProven"]
    if twin.node_keys[a["key"]].pubkey() != state["clients"][a["index"]]["p2p_identity"]:
        return ERROR_CODES["EquivocationNotProven"]
    return core.convict(run, env, a["index"], 0, a["step"])


def bump_nonce(run: bytearray) -> None:
    nonce = int.from_bytes(run[NONCE_OFFSET : NONCE_OFFSET + 8], "little") + 1
    run[NONCE_OFFSET : NONCE_OFFSET + 8] = nonce.to_bytes(8, "little")


def registry_earned(core: CoordinatorCore, run: bytearray, signer: Pubkey) -> int:
    """The wallet's unclaimed points, read from the raw bytes (decoding 112 KB per step is slow)."""
    idl = core.idl
    at, size = idl.offset_of("Run", "registry"), idl.size_of({"defined": {"name": "RegistryEntry"}})
    length_at, earned_at = (
        idl.offset_of("Run", "registry_len"),
        idl.offset_of("RegistryEntry", "earned"),
    )
    for r in range(int.from_bytes(run[length_at : length_at + 4], "little")):
        entry = at + r * size
        if run[entry : entry + 32] == bytes(signer):
            return int.from_bytes(run[entry + earned_at : entry + earned_at + 8], "little")
    return 0


def authorization_apply(core: CoordinatorCore, run: bytearray, op: Op, twin: Twin) -> int:
    wallet = op.args["wallet"]
    held = twin.authorizations.get(wallet)
    if op.name == "close_join_authorization":
        if held is None:
            return ERROR_CODES["WrongAccountOwner"]
        del twin.authorizations[wallet]
    elif held == (op.name == "grant") or (held is None and op.name == "revoke"):
        return ERROR_CODES["NoChange"]
    else:
        twin.authorizations[wallet] = op.name == "grant"
    if op.name != "grant" and core.withdraw_pending_join(run, twin.wallets[wallet].pubkey()):
        bump_nonce(run)
    return 0


def chain_apply(chain: Chain, run: Pubkey, op: Op, signer: Keypair, twin: Twin):
    if op.name == "join_run":
        node_key = twin.node_keys[op.args["node"]]
        return chain.join(signer, run, node_key, endpoint=op.args["endpoint"])
    if op.name == "settle_points":
        return chain.settle_points(signer, run, twin.wallets[op.args["wallet"]].pubkey())
    if op.name == "report_equivocation":
        a = op.args
        key = twin.node_keys[a["key"]]

        def proof(statement: dict) -> Instruction:
            epoch = chain.state(run)["epoch"]["epoch"]
            message = result_statement(chain.idl, run, epoch, a["step"], (statement["batch_start"], statement["batch_end"]),
                                       statement["commitment"])  # fmt: skip
            return ed25519_verify_instruction(
                bytes(key.pubkey()), bytes(key.sign_message(message)), message
            )

        args = {k: a[k] for k in ("index", "step", "first", "second")}
        report = chain.call_ix("report_equivocation", signer, run, args)
        return chain.send([proof(a["first"]), proof(a["second"]), report], [signer])
    if op.name in ("grant", "revoke", "close_join_authorization"):
        grantee = twin.wallets[op.args["wallet"]].pubkey()
        accounts = {"join_authority": twin.authority.pubkey(), "run": run,
                    "authorization": chain.join_authorization_address(run, grantee)}  # fmt: skip
        if op.name == "close_join_authorization":
            return chain.send([chain.ix(op.name, accounts)], [twin.authority])
        args = {"grantee": grantee, "allowed": op.name == "grant"}
        return chain.send([chain.ix("set_join_authorization", accounts, args)], [twin.authority])
    return chain.call(op.name, signer, run, op.args or None)


def check_invariants(state: dict, previous: dict | None) -> None:
    epoch, config = state["epoch"], state["config"]
    assert state["run_state"] in ("Uninitialized", "WaitingForMembers", "Warmup", "RoundTrain", "RoundWitness",
                                  "Cooldown", "Finished", "Paused")  # fmt: skip
    assert state["registry_len"] <= 256 and epoch["clients_len"] <= 256
    assert epoch["clients_len"] <= config["global_batch_size_start"]
    registry = [e["signer"] for e in state["registry"][: state["registry_len"]]]
    assert len(set(registry)) == len(registry), "a wallet is registered twice"
    members = state["clients"][: epoch["clients_len"]]
    assert len({c["signer"] for c in members}) == len(members), "a wallet is in the epoch twice"
    pending = sum(
        e["join_marker"] == state["next_active"] for e in state["registry"][: state["registry_len"]]
    )
    assert pending <= config["global_batch_size_start"]
    quorum = config["witness_nodes"] // 2 + 1
    for slot, round_ in enumerate(epoch["rounds"]):
        mask = int.from_bytes(round_["active_mask"], "little")
        assert bin(mask).count("1") == round_["active_count"]
        assert mask >> epoch["clients_len"] == 0, "an active bit beyond the epoch's clients"
        records = state["witnesses"][slot]["records"][: round_["witnesses_len"]]
        indices = [w["index"] for w in records]
        assert len(set(indices)) == len(indices), "a client has two records in one round"
        assert round_["witnesses_len"] <= config["witness_nodes"], "more records than seats"
        witnessed = int.from_bytes(round_["witnessed_mask"], "little")
        assert witnessed == sum(1 << i for i in indices), (
            "witnessed_mask is not the records' indices"
        )
        convicted = {i for i, c in enumerate(state["clients"]) if c["state"] == "Convicted"}
        if round_[
            "decided"
        ]:  # the deciding majority (a root with one bitmap), and no record changed since
            votes = [(w["results_root"], w["participants"]) for w in records]
            behind = max(votes.count(v) for v in votes if v[0] == round_["decided_root"])
            counted = max(sum(v == u and w["index"] not in convicted for u, w in zip(votes, records, strict=True))
                          for v in votes if v[0] == round_["decided_root"])  # fmt: skip
            assert (
                behind >= round_["decided_votes"] >= quorum and counted <= round_["decided_votes"]
            )
        if round_["digest_votes"]:  # a convicted member's record counts for nothing
            behind = sum(w["weights_digest"] == round_["weights_digest"] for w in records)
            counted = sum(w["weights_digest"] == round_["weights_digest"] and w["index"] not in convicted
                          for w in records)  # fmt: skip
            assert behind >= round_["digest_votes"] >= quorum and counted <= round_["digest_votes"]
    for c in members:
        if c["state"] != "Healthy":
            assert c["registry_index"] == 0xFFFF or c["registry_index"] < 256
        # a round is delivered only when a decision names it, at most once per decided round
        assert c["delivered"] <= epoch["decided_rounds"], "delivered more rounds than were decided"
    head = epoch["rounds"][epoch["rounds_head"]]["height"]
    assert epoch["decided_rounds"] <= head, "the epoch's first round credits nobody"
    for e in state["registry"][: state["registry_len"]]:
        assert e["proven_share"] <= 4 * 16, "a proven share beyond the largest ratio's clamp"
    window = len(state["check_seeds"])
    for at, entry in enumerate(state["check_seeds"]):
        assert entry["step"] == 0 or entry["step"] % window == at, (
            "a check seed outside its window slot"
        )
    open_checks = [(t["step"], t["trainer"]) for t in state["failed_checks"] if t["step"]]
    assert len(set(open_checks)) == len(open_checks), "two tallies of one check"
    for t in state["failed_checks"]:
        if t["step"]:
            assert (
                0 < t["reporters"] < 8
                and t["trainer"] < epoch["clients_len"]
                and t["opener"] < epoch["clients_len"]
            )
    open_disputes = [(d["step"], d["trainer"]) for d in state["disputes"] if d["step"]]
    assert len(set(open_disputes)) == len(open_disputes), "two disputes of one check"
    for d in state["disputes"]:
        if d["step"]:
            assert d["trainer"] < epoch["clients_len"] and d["seed_step"] > d["step"]
            assert not any(a & b for a, b in zip(d["fails"], d["passes"], strict=True)), (
                "a member reported both ways"
            )
    if previous is not None:
        assert state["progress"]["step"] >= previous["progress"]["step"], "step went backwards"
        assert state["nonce"] >= previous["nonce"]
        if previous["run_state"] == "Finished":
            assert state["run_state"] == "Finished"


def _setup(chain: Chain, twin: Twin) -> Pubkey:
    run = chain.create_run(twin.authority, b"random-run")
    chain.open_run(twin.authority, run, CONFIG, make_model(cold_start_warmup_steps=2))
    chain.call(
        "set_checkpointers",
        twin.authority,
        run,
        {"checkpointers": [twin.checkpointer.pubkey()] + [Pubkey.default()] * 7},
    )
    return run


def _play_an_epoch(chain: Chain, core: CoordinatorCore, run: Pubkey, twin: Twin) -> None:
    """One successful epoch of the first three wallets, so the registry starts with points to claim."""
    play_epoch(chain, core, run, twin.wallets[:3], CONFIG)
    assert chain.state(run)["registry"][0]["earned"] > 0


def test_host_core_invariants_over_thousands_of_operations(chain, core):
    twin = Twin(chain, wallets=9)
    run = _setup(chain, twin)
    _play_an_epoch(chain, core, run, twin)
    host = bytearray(chain.run_bytes(run)[8:])
    generator = Generator(seed=1, twin=twin, core=core)
    now, slot = chain.now, chain.slot
    previous = None
    successes = 0
    states_seen = set()
    for i in range(3000):
        state = core.idl.decode_account("Run", core.idl.accounts["Run"] + bytes(host))
        check_invariants(state, previous)
        states_seen.add(state["run_state"])
        previous = state
        op = generator.next(state, bytes(host))
        if op.name == "advance":
            now += op.advance
            slot += op.advance * 5 // 2 + 1
            continue
        # SlotHashes keeps 512 blocks: a frozen slot older than that is no longer proven (inputs re-freeze)
        slot_hash = slot.to_bytes(8, "little") * 4
        env = Env(
            now, slot_hash, run, slot, ((slot - 1, slot_hash), (max(slot - 512, 0), bytes(32)))
        )
        before = bytes(host)
        code = host_apply(core, host, env, op, twin.signer(op, state).pubkey(), twin)
        core.take_events()
        if code:
            assert bytes(host) == before, (
                f"step {i}: {op.name} failed with {code} but changed the state"
            )
        else:
            successes += 1
    assert successes > 300  # no-op re-joins and taken identities fail by name
    assert {"WaitingForMembers", "Warmup", "RoundTrain", "RoundWitness", "Cooldown"} <= states_seen


class DisputeGenerator(Generator):
    """The same operations without pauses or exits, and many more reports: checks, disputes and their
    committees' votes, over epochs long enough for disputes to be decided."""

    def next(self, state: dict, run_bytes: bytes) -> Op:
        op = super().next(state, run_bytes)
        if op.name in ("set_paused", "exit_run"):
            return Op("tick", op.signer if op.signer >= 0 else 0)
        if (
            op.name == "advance" and op.advance > 3
        ):  # epochs of many rounds: room for checks and disputes
            return Op("advance", 0, advance=1)
        members = state["clients"][: state["epoch"]["clients_len"]]
        if (
            state["run_state"] in ("RoundTrain", "RoundWitness", "Cooldown")
            and members
            and self.rng.random() < 0.3
        ):
            op = self._report_check(state, run_bytes, members)
            if (
                op.args["reason"] != "Passed" and self.rng.random() < 0.5
            ):  # claims a refutation can convict
                op.args["reason"] = "PayloadMismatch"
        return op


def agree(chain, core, run: Pubkey, twin: Twin, generator: Generator, ops: int):
    """Apply `ops` generated operations to the chain and to the host core: identical codes, events and
    bytes after each. Returns (result codes, phases seen, successes, successful operations and events)."""
    host = bytearray(chain.run_bytes(run)[8:])
    codes = set()
    states = set()
    successes = 0
    done: Counter[str] = Counter()  # successful operations, and the events they logged
    for i in range(ops):
        state = chain.state(run)
        states.add(state["run_state"])
        op = generator.next(state, bytes(host))
        if op.name == "advance":
            chain.advance(op.advance)
            continue
        signer = twin.signer(op, state)
        host_code = host_apply(core, host, chain.env(run), op, signer.pubkey(), twin)
        host_events = core.take_events()
        try:
            result = chain_apply(chain, run, op, signer, twin)
            chain_code, chain_events = (
                0,
                chain.idl.events_in_logs(list(result.logs()), chain.program_id),
            )
        except ProgramFailed as e:
            chain_code, chain_events = e.code, []
        # the program moves points into Points accounts (the core only hands them out)
        chain_events = [e for e in chain_events if e[0] != "PointsClaimed"]
        if op.signer >= 0 and op.name in ("exit_run", "claim_points", "settle_points"):
            owner = op.args["wallet"] if op.name == "settle_points" else op.signer
            assert (chain.points(run, twin.wallets[owner].pubkey()) or 0) == twin.claimed.get(
                owner, 0
            )
        assert chain_code == host_code, (
            f"step {i}: {op.name}: chain {chain_code} != host {host_code}"
        )
        if host_code == 0:
            assert chain_events == host_events, f"step {i}: {op.name}: events differ"
        assert chain.run_bytes(run)[8:] == bytes(host), f"step {i}: {op.name}: state differs"
        codes.add(host_code)
        successes += host_code == 0
        if host_code == 0:
            done.update([op.name, *(name for name, _ in host_events)])
            done.update(e["reason"] for name, e in host_events if name == "ClientConvicted")
            round_ = state["epoch"]["rounds"][state["epoch"]["rounds_head"]]
            if (
                op.name == "witness"
                and round_["witnessed_mask"][op.args["index"] // 8] >> (op.args["index"] % 8) & 1
            ):
                done["replaced"] += 1
    return codes, states, successes, done


def test_chain_and_host_agree_bit_for_bit(chain, core):
    twin = Twin(chain, wallets=7)
    run = _setup(chain, twin)
    _play_an_epoch(chain, core, run, twin)
    codes, states, successes, done = agree(
        chain, core, run, twin, Generator(seed=2, twin=twin, core=core), 700
    )
    assert sum(twin.claimed.values()) > 0, "no points were ever claimed"
    assert successes > 50 and len(codes) >= 5, (
        f"the generator exercised too little: {sorted(codes)}"
    )
    exercised = {"witness", "replaced", "vote_weights", "settle_points", "report_equivocation", "StepDecided",
                 "ClientConvicted", "CheckpointUpdated", "report_check", "CheckFailed", "Equivocation"}  # fmt: skip
    assert all(done[name] for name in exercised), (
        f"never exercised: {[n for n in exercised if not done[n]]}"
    )
    assert {"Warmup", "RoundTrain", "RoundWitness", "Cooldown"} <= states


def test_chain_and_host_agree_through_disputes(chain, core):
    twin = Twin(chain, wallets=7)
    run = _setup(chain, twin)
    _play_an_epoch(chain, core, run, twin)
    _, _, _, done = agree(
        chain, core, run, twin, DisputeGenerator(seed=SEED_DISPUTES, twin=twin, core=core), 700
    )
    # a refutation's FalseReport convictions: test_verification.py (this run's refutations found no replay claim)
    exercised = {"report_check", "CheckFailed", "DisputeOpened", "DisputeReported", "DisputeClosed",
                 "FailedVerification"}  # fmt: skip
    assert all(done[name] for name in exercised), (
        f"never exercised: {[n for n in exercised if not done[n]]}"
    )
