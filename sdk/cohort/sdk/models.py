"""Typed views of the coordinator's state and configuration, decoded from (and encoded to) the IDL's dicts.

Text fields are NUL-padded byte arrays on chain and `str` here. The config types are what a run config
file fills in and what `update_config`/`update_model`/`update_metadata` send.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from solders.pubkey import Pubkey


class RunState(enum.StrEnum):
    Uninitialized = "Uninitialized"
    WaitingForMembers = "WaitingForMembers"
    Warmup = "Warmup"
    RoundTrain = "RoundTrain"
    RoundWitness = "RoundWitness"
    Cooldown = "Cooldown"
    Finished = "Finished"
    Paused = "Paused"

    @property
    def halted(self) -> bool:
        return self in (RunState.Uninitialized, RunState.Finished, RunState.Paused)


class CheckFailure(enum.StrEnum):
    """What a verifier reports about a checked step (report_check)."""

    PayloadMismatch = "PayloadMismatch"  # its replay disagrees with the published payload
    StateMismatch = (
        "StateMismatch"  # ... or with the optimizer state the trainer committed after the step
    )
    StateNotDelivered = (
        "StateNotDelivered"  # the trainer did not deliver the states the check needs
    )
    ResultNotDelivered = "ResultNotDelivered"  # ... or its result
    Passed = "Passed"  # the replay held up: only a dispute's committee reports it


class ConvictionReason(enum.StrEnum):
    Equivocation = "Equivocation"  # two signed results of one step with different commitments
    FailedVerification = (  # a strict majority of a check's verifiers, then of its dispute's committee
        "FailedVerification"
    )
    FalseReport = "FalseReport"  # it claimed a replay mismatch that a dispute's committee refuted


# -- configuration (what the authority sets) ------------------------------------------------------------


@dataclass(frozen=True)
class RunConfig:
    warmup_time: int
    cooldown_time: int
    max_round_train_time: int
    round_witness_time: int
    epoch_time: int
    global_batch_size_warmup_tokens: int
    total_steps: int
    init_min_clients: int
    min_clients: int
    witness_nodes: int
    global_batch_size_start: int
    global_batch_size_end: int
    waiting_for_members_extra_time: int
    join_policy: str = "Open"
    max_share_ratio: int = (
        4  # a fast member's batch may be up to this many times the median's (1: equal)
    )
    verification_percent: int = 0  # share of trainers' steps verifiers replay and check (0..100)
    pipeline_depth: int = 2  # step s trains on the weights after step s - pipeline_depth (2..4)
    # epochs a convicted wallet and its node key sit out after the conviction's (1..MAX_BAN_EPOCHS)
    conviction_ban_epochs: int = 4
    # KiB/s every member must serve its committed states at: a check's fetch deadline follows it (16..65535)
    check_rate_kib: int = 256


@dataclass(frozen=True)
class Checkpoint:
    kind: str
    repo: str
    step: int = 0
    revision: str = ""
    weights_sha256: bytes = bytes(32)


@dataclass(frozen=True)
class LrSchedule:
    kind: str
    base_lr: float
    final_lr: float
    warmup_steps: int
    total_steps: int
    stable_steps: int = 0


@dataclass(frozen=True)
class DistroConfig:
    compression_decay: float
    compression_topk: int
    compression_chunk: int
    clip_grad_norm: float = 0.0
    weight_decay: float = 0.0
    quantize_1bit: bool = True


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    max_seq_len: int
    preset: str
    checkpoint: Checkpoint
    data_location: str
    lr_schedule: LrSchedule
    optimizer: DistroConfig
    data_type: str = "Pretraining"
    cold_start_warmup_steps: int = 0


@dataclass(frozen=True)
class RunMetadata:
    name: str = ""
    description: str = ""
    client_version: str = ""
    num_parameters: int = 0
    vocab_size: int = 0


@dataclass(frozen=True)
class Progress:
    epoch: int = 0
    step: int = 1
    epoch_start_data_index: int = 0


# -- state (what the chain tracks) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    index: int
    signer: Pubkey
    p2p_identity: Pubkey
    state: str
    exited_height: int
    dissents: int = 0  # decisions of this epoch its witness root lost
    weights_vote: bytes = bytes(32)  # manifest hash it voted at the epoch's end (zero: none)
    share: int = 4  # its weight in each round's batch (MEDIAN_SHARE = 4 for the median member)
    # rounds of this epoch whose decided result set named it: it earns `share` points for each (outside the
    # hot prefix: as of the last full read for a Run followed by its hot prefix)
    delivered: int = 0

    @property
    def healthy(self) -> bool:
        return self.state == "Healthy"


@dataclass(frozen=True)
class WitnessRecord:
    """One seat's record of the step before its round: which trainers' results it holds (bitmap), the
    sha256 of its results list, and the digest of its weights after the steps before that."""

    index: int
    position: int
    participants: bytes
    results_root: bytes
    weights_digest: int

    def saw(self, index: int) -> bool:
        return bool(self.participants[index // 8] >> (index % 8) & 1)


@dataclass(frozen=True)
class Round:
    height: int
    data_index: int
    random_seed: int
    batch_size: int
    active_count: int
    active_mask: bytes
    witnesses: tuple[tuple[int, int], ...]  # (epoch index, position) in arrival order
    records: tuple[
        WitnessRecord, ...
    ] = ()  # empty in a Run read from its hot prefix only (see fresh_records)
    witnesses_len: int = 0
    decided: bool = (
        False  # the previous step's applied set is the results list whose sha256 is decided_root
    )
    decided_root: bytes = bytes(32)
    weights_digest: int = 0  # what a strict majority of seats reported (when digest_votes > 0)
    digest_votes: int = 0
    witnessed_mask: bytes = bytes(32)

    def active(self, index: int) -> bool:
        return bool(self.active_mask[index // 8] >> (index % 8) & 1)


@dataclass(frozen=True)
class RegistryEntry:
    signer: Pubkey
    p2p_identity: Pubkey
    earned: int
    pending: bool  # joined for the next epoch
    # after a conviction: the first epoch the wallet may join again (0: never convicted)
    banned_until: int = 0
    # the highest share it may get at the next Warmup, earned by delivering (0: none yet, MEDIAN_SHARE)
    proven_share: int = 0


@dataclass(frozen=True)
class FailedCheckTally:
    """The failure reports of one check (step, trainer) the chain holds (Run.failed_checks): bit k of
    `reporters` is the check's k-th verifier (CoordinatorCore.check_plan's order)."""

    step: int
    trainer: int  # epoch client index
    reporters: int
    replay: int  # bit k: the k-th verifier claimed a replay mismatch

    @property
    def reports(self) -> int:
        return self.reporters.bit_count()


@dataclass(frozen=True)
class DisputeTally:
    """One dispute slot the chain holds (Run.dispute_tallies): its committee's votes so far (epoch indices)."""

    step: int
    trainer: int
    seed_step: int  # the round whose seed draws the committee
    fails: frozenset[int]
    passes: frozenset[int]


def _bits(bitmap: bytes) -> frozenset[int]:
    return frozenset(i for i in range(len(bitmap) * 8) if bitmap[i // 8] >> (i % 8) & 1)


@dataclass(frozen=True)
class WalletPoints:
    """A wallet's reward points in a run: claimed (its Points account, which outlives the registry entry)
    and unclaimed (still in the registry; exit_run and claim_points move them over)."""

    wallet: Pubkey
    claimed: int
    unclaimed: int

    @property
    def total(self) -> int:
        return self.claimed + self.unclaimed


@dataclass(frozen=True)
class Run:
    """One Run account, decoded. `data` keeps the raw bytes for the host core's predictions."""

    address: Pubkey
    nonce: int
    run_id: str
    state: RunState
    pending_pause: bool
    authority: Pubkey
    join_authority: Pubkey
    checkpointers: tuple[Pubkey, ...]
    run_state_start: int
    metadata: RunMetadata
    config: RunConfig
    model: ModelConfig
    progress: Progress
    clients: tuple[Client, ...]
    # this epoch's stored rounds, current first (in Warmup: its witnesses; in WaitingForMembers: the ended
    # epoch's, which the chain keeps until the next Warmup)
    rounds: tuple[Round, ...]
    epoch_start: int
    last_step: int
    registry: tuple[RegistryEntry, ...]
    data: bytes = field(repr=False, compare=False)
    seed_pending: bool = (
        False  # the next round's inputs are frozen; a tick from the next slot starts it
    )
    # check seeds Cooldown revealed so far (the checks of the epoch's last steps are drawn from them)
    cooldown_seeds: int = 0
    next_seed: int = 0  # seed of the round after the current one (known one round ahead)
    next_mask: bytes = bytes(32)  # its trainers
    members_nonce: int = 0  # moves whenever the epoch's member list or a member's state changes
    fresh_records: bool = (
        True  # False when only the hot prefix is fresh: round records then left out
    )
    start_step: int = 0  # the epoch's first step
    epoch_number: int = (
        0  # the number the epoch got when it started: the epoch its result statements name
    )
    cold_start_epoch: bool = (
        False  # the epoch follows a pause: every replica's momentum starts cold
    )
    # (checked step, seed that draws its checks) of every step whose check seed the chain keeps, oldest
    # first; outside the hot prefix (a Run read from its hot prefix alone lists what the last full read did)
    check_seeds: tuple[tuple[int, int], ...] = ()
    check_seed_lag: int = (
        4  # CHECK_SEED_LAG: the checks of step s are drawn by the seed of round s + this
    )
    # (step, trainer, seed_step) of the disputes the chain holds (CoordinatorCore.dispute_committee tells
    # whether one is open and who replays it); outside the hot prefix, like check_seeds
    disputes: tuple[tuple[int, int, int], ...] = ()
    # (attested step, its decided root or None: its round ended undecided) of the epoch's last rounds, kept past
    # the round ring (DECISION_WINDOW of them, in the hot prefix), oldest first
    decisions: tuple[tuple[int, bytes | None], ...] = ()
    # the slots of failed-check tallies and disputes the chain holds (outside the hot prefix, like disputes;
    # a slot may hold an expired tally or a lapsed dispute: status.verification tells which are open)
    failed_checks: tuple[FailedCheckTally, ...] = ()
    dispute_tallies: tuple[DisputeTally, ...] = ()

    def decided(self, step: int) -> tuple[bool, bytes | None]:
        """Whether the chain still tells what step `step`'s round decided, and its root (None: undecided)."""
        for kept, root in self.decisions:
            if kept == step:
                return True, root
        return False, None

    def check_seed(self, step: int) -> int | None:
        """The seed that draws the checks of `step` (CoordinatorCore.check_plan takes it), or None: not
        revealed yet, no longer kept, or not a step of this epoch. Reports of `step` are taken while it is
        known, in RoundTrain, RoundWitness and Cooldown."""
        if (
            self.state not in (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown)
            or step < self.start_step
        ):
            return None
        seed_step = step + self.check_seed_lag
        for r in self.rounds:  # the hot prefix: the stored rounds' seeds and the next round's
            if self.start_step + r.height == seed_step:
                return r.random_seed
            if r is self.rounds[0] and self.start_step + r.height + 1 == seed_step:
                return self.next_seed
        return dict(self.check_seeds).get(step)

    @property
    def newest_seed_step(self) -> int:
        """The step of the newest round seed revealed, in a round: the next round's (a round's start reveals
        it), or, while the next round waits for its seed (`seed_pending`), that round's own, revealed with the
        round before it; in Cooldown, one more for each seed it revealed after the epoch's last round."""
        if self.state == RunState.Cooldown:
            return self.progress.step + self.cooldown_seeds
        return self.progress.step + (0 if self.seed_pending else 1)

    @property
    def check_step(self) -> int:
        """The check clock (the program's verification.c current_step): the step of the current round, and in
        Cooldown one more for each seed it revealed. Disputes lapse and seeds leave the window by it."""
        return self.newest_seed_step - 1

    @property
    def current_round(self) -> Round | None:
        return self.rounds[0] if self.rounds else None

    @property
    def round_active(self) -> bool:
        return self.state in (RunState.RoundTrain, RunState.RoundWitness)

    def phase_timeout(self) -> int | None:
        """Seconds the current phase lasts at most (None: no time limit)."""
        c = self.config
        return {
            RunState.WaitingForMembers: c.waiting_for_members_extra_time,
            RunState.Warmup: c.warmup_time,
            RunState.RoundTrain: c.max_round_train_time,
            RunState.RoundWitness: c.round_witness_time,
            RunState.Cooldown: c.cooldown_time,
        }.get(self.state)

    def client(self, signer: Pubkey) -> Client | None:
        return next((c for c in self.clients if c.signer == signer), None)

    @classmethod
    def decode(cls, address: Pubkey, data: bytes, idl: Any, *, fresh_records: bool = True) -> Run:
        """The Run in `data`. With fresh_records=False (the hot prefix was read, the rest is an older copy)
        the rounds' witness records are left out rather than shown stale."""
        raw = idl.decode_account_reusing("Run", data)  # a follower decodes it several times a round
        epoch = raw["epoch"]
        rounds_raw = epoch["rounds"]
        head = epoch["rounds_head"] % len(rounds_raw)
        rounds = []
        ended = raw["run_state"] == "WaitingForMembers" and epoch["clients_len"] > 0
        if raw["run_state"] in ("Warmup", "RoundTrain", "RoundWitness", "Cooldown") or ended:
            height = rounds_raw[head]["height"]
            for back in range(min(height + 1, len(rounds_raw))):
                slot = (head - back) % len(rounds_raw)
                r = rounds_raw[slot]
                records = tuple(
                    WitnessRecord(w["index"], w["position"], bytes(w["participants"]), bytes(w["results_root"]),
                                  w["weights_digest"])
                    for w in raw["witnesses"][slot]["records"][: r["witnesses_len"]]
                ) if fresh_records else ()  # fmt: skip
                rounds.append(
                    Round(
                        r["height"],
                        r["data_index"],
                        r["random_seed"],
                        r["batch_size"],
                        r["active_count"],
                        r["active_mask"],
                        tuple((w.index, w.position) for w in records),
                        records,
                        r["witnesses_len"],
                        r["decided"],
                        bytes(r["decided_root"]),
                        r["weights_digest"],
                        r["digest_votes"],
                        bytes(r["witnessed_mask"]),
                    )
                )
        clients = tuple(
            Client(i, c["signer"], c["p2p_identity"], c["state"], c["exited_height"], c["dissents"],
                   bytes(c["weights_vote"]), c["share"], c.get("delivered", 0))
            for i, c in enumerate(raw["clients"][: epoch["clients_len"]])
        )  # fmt: skip
        lag = idl.constants["CHECK_SEED_LAG"]
        check_seeds = tuple(sorted(
            (e["step"] - lag, e["seed"]) for e in raw["check_seeds"] if e["step"] - lag >= epoch["start_step"]
        )) if raw["run_state"] in ("RoundTrain", "RoundWitness", "Cooldown") else ()  # fmt: skip
        disputes = tuple(sorted(
            (d["step"], d["trainer"], d["seed_step"]) for d in raw.get("disputes", ()) if d["step"]
        )) if raw["run_state"] in ("RoundTrain", "RoundWitness", "Cooldown") else ()  # fmt: skip
        checking = raw["run_state"] in ("RoundTrain", "RoundWitness", "Cooldown")
        failed_checks = tuple(sorted(
            (FailedCheckTally(t["step"], t["trainer"], t["reporters"], t["replay"])
             for t in raw.get("failed_checks", ()) if t["step"]), key=lambda t: (t.step, t.trainer)
        )) if checking else ()  # fmt: skip
        dispute_tallies = tuple(sorted(
            (DisputeTally(d["step"], d["trainer"], d["seed_step"], _bits(bytes(d["fails"])),
                          _bits(bytes(d["passes"]))) for d in raw.get("disputes", ()) if d["step"]),
            key=lambda d: (d.step, d.trainer),
        )) if checking else ()  # fmt: skip
        decisions = tuple(sorted(
            (e["step"], bytes(e["root"]) if e["outcome"] == 1 else None)
            for e in epoch.get("decisions", ()) if e["outcome"] in (1, 2) and e["step"] >= epoch["start_step"]
        ))  # fmt: skip
        registry = tuple(
            RegistryEntry(e["signer"], e["p2p_identity"], e["earned"], e["join_marker"] == raw["next_active"],
                          e.get("banned_until", 0), e.get("proven_share", 0))
            for e in raw["registry"][: raw["registry_len"]]
        )  # fmt: skip
        return cls(
            address=address,
            nonce=raw["nonce"],
            run_id=text(raw["run_id"]),
            state=RunState(raw["run_state"]),
            pending_pause=raw["pending_pause"],
            authority=raw["authority"],
            join_authority=raw["join_authority"],
            checkpointers=tuple(k for k in raw["checkpointers"] if k != Pubkey.default()),
            run_state_start=raw["run_state_start"],
            metadata=from_idl(RunMetadata, raw["metadata"]),
            config=from_idl(RunConfig, raw["config"]),
            model=from_idl(ModelConfig, raw["model"]),
            progress=from_idl(Progress, raw["progress"]),
            clients=clients,
            rounds=tuple(rounds),
            epoch_start=epoch["start_timestamp"],
            last_step=epoch["last_step"],
            registry=registry,
            data=bytes(data),
            seed_pending=raw["seed_pending"],
            cooldown_seeds=raw["cooldown_seeds"],
            next_seed=raw["next_seed"],
            next_mask=bytes(raw["next_mask"]),
            members_nonce=epoch["members_nonce"],
            fresh_records=fresh_records,
            start_step=epoch["start_step"],
            epoch_number=epoch["epoch"],
            cold_start_epoch=epoch["cold_start_epoch"],
            check_seeds=check_seeds,
            check_seed_lag=lag,
            disputes=disputes,
            decisions=decisions,
            failed_checks=failed_checks,
            dispute_tallies=dispute_tallies,
        )


# -- events ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckFailed:
    """A verifier's report that its check of (step, trainer) failed; a strict majority of the check's
    verifiers opens a dispute (DisputeOpened), whose committee convicts the trainer or refutes the check."""

    run: Pubkey
    verifier: Pubkey  # its wallet
    step: int
    trainer: int  # epoch client index
    reason: CheckFailure
    reports: int  # failure reports of this check so far

    @classmethod
    def decode(cls, value: dict[str, Any]) -> CheckFailed:
        """From the IDL's decoding of the event (`Idl.events_in_logs`)."""
        return cls(value["run"], value["verifier"], value["step"], value["trainer"], CheckFailure(value["reason"]),
                   value["reports"])  # fmt: skip


# -- conversion to and from the IDL's dicts -------------------------------------------------------------


ENUM_FIELDS = frozenset(
    {"join_policy", "kind", "architecture", "data_type"}
)  # str fields that are enums


def text(raw: bytes) -> str:
    """A NUL-padded byte array as text."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_idl(cls: type, value: dict[str, Any]) -> Any:
    """A config dataclass from a decoded IDL struct (padding dropped, text decoded)."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        hint, v = _hints(cls)[f.name], value[f.name]
        if dataclasses.is_dataclass(hint):
            v = from_idl(hint, v)  # type: ignore[arg-type]
        elif hint is str and isinstance(v, bytes):
            v = text(v)
        kwargs[f.name] = v
    return cls(**kwargs)


def to_idl(obj: Any) -> dict[str, Any]:
    """The IDL dict of a config dataclass (text encoded; the coder pads it and the padding fields)."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            v = to_idl(v)
        elif isinstance(v, str) and f.name not in ENUM_FIELDS:
            v = v.encode()
        out[f.name] = v
    return out
