"""Each member's verification history, from the coordinator's stored events: the checks that failed against
it (CheckFailed), the disputes of its steps with their outcome (DisputeOpened / DisputeReported /
DisputeClosed), and its convictions with their reason (ClientConvicted). Pure: no I/O.

Check and dispute events name the member by its epoch client index; the epoch is the one the latest Warmup
(RunStateChanged) before the event started. Its wallet comes from events that carry both (ClientConvicted,
ClientDropped) or from `wallet_of`, which the caller answers from what else it knows (the run's current
members, the witnesses of that epoch), else it is None."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# the events read here: RunStateChanged only where it starts an epoch (to_state Warmup)
NAMES = ("CheckFailed", "DisputeOpened", "DisputeReported", "DisputeClosed", "ClientConvicted",
         "ClientDropped")  # fmt: skip


@dataclass(frozen=True)
class StoredEvent:
    id: int  # the store's event id: chain order
    name: str
    data: dict[str, Any]
    block_time: int | None = None
    signature: str | None = None


@dataclass(frozen=True)
class FailedCheckEvent:
    step: int
    verifier: str  # the reporting verifier's wallet
    reason: str  # a CheckFailure name
    reports: int  # failure reports of this check so far
    block_time: int | None
    signature: str | None


@dataclass
class DisputeRecord:
    step: int
    seed_step: int
    opened_at: int | None
    outcome: str | None = (
        None  # Convicted, Refuted or Lapsed; None while open (or while none closed it)
    )
    fails: int = 0
    passes: int = 0
    committee: int | None = None  # its size, once a member of it reported
    closed_at: int | None = None


@dataclass(frozen=True)
class Conviction:
    step: int
    reason: str  # ConvictionReason
    forfeited: int  # unclaimed points it lost
    block_time: int | None
    signature: str | None


@dataclass
class MemberHistory:
    epoch: int
    index: int  # epoch client index
    wallet: str | None
    failed_checks: list[FailedCheckEvent] = field(default_factory=list)
    disputes: list[DisputeRecord] = field(default_factory=list)
    convictions: list[Conviction] = field(default_factory=list)


@dataclass
class VerificationHistory:
    checks_failed: int  # CheckFailed events
    disputes_opened: int
    convictions: int
    members: list[MemberHistory]  # newest epoch first, then by index

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def history(
    events: Iterable[StoredEvent], wallet_of: Callable[[int, int], str | None] = lambda e, i: None
) -> VerificationHistory:
    """The members' histories in `events` (chain order: Warmup RunStateChanged and the NAMES events)."""
    epoch = 0
    known: dict[tuple[int, int], str] = {}  # (epoch, index) -> wallet, from events that carry both
    members: dict[tuple[int, int], MemberHistory] = {}
    open_disputes: dict[tuple[int, int, int], DisputeRecord] = {}  # (epoch, trainer, step)
    counts = {"CheckFailed": 0, "DisputeOpened": 0, "ClientConvicted": 0}

    def member(index: int) -> MemberHistory:
        return members.setdefault((epoch, index), MemberHistory(epoch, index, None))

    def dispute(d: dict[str, Any], at: int | None) -> DisputeRecord:
        key = (epoch, d["trainer"], d["step"])
        if (
            key not in open_disputes
        ):  # its opening is not stored (indexed later): shown from what is
            open_disputes[key] = DisputeRecord(d["step"], d.get("seed_step", 0), None)
            member(d["trainer"]).disputes.append(open_disputes[key])
        record = open_disputes[key]
        if at is not None and record.opened_at is None and "seed_step" in d:
            record.opened_at, record.seed_step = at, d["seed_step"]
        return record

    for e in events:
        d = e.data
        if e.name in counts:
            counts[e.name] += 1
        match e.name:
            case "RunStateChanged" if d.get("to_state") == "Warmup":
                epoch = d["epoch"]
                open_disputes.clear()  # disputes are cleared with the epoch
            case "CheckFailed":
                member(d["trainer"]).failed_checks.append(FailedCheckEvent(
                    d["step"], d["verifier"], d["reason"], d["reports"], e.block_time, e.signature))  # fmt: skip
            case "DisputeOpened":
                key = (epoch, d["trainer"], d["step"])
                open_disputes.pop(key, None)  # a new dispute of the same step (the last one lapsed)
                dispute(d, e.block_time)
            case "DisputeReported":
                record = dispute(d, None)
                record.fails, record.passes, record.committee = (
                    d["fails"],
                    d["passes"],
                    d["committee"],
                )
            case "DisputeClosed":
                record = dispute(d, None)
                record.outcome, record.closed_at = d["outcome"], e.block_time
                record.fails, record.passes = d["fails"], d["passes"]
                open_disputes.pop((epoch, d["trainer"], d["step"]))
            case "ClientConvicted":
                known[(epoch, d["index"])] = d["signer"]
                member(d["index"]).convictions.append(Conviction(
                    d["step"], d["reason"], d["forfeited"], e.block_time, e.signature))  # fmt: skip
            case "ClientDropped":
                known[(epoch, d["index"])] = d["signer"]
    out = sorted(members.values(), key=lambda m: (-m.epoch, m.index))
    for m in out:
        m.wallet = known.get((m.epoch, m.index)) or wallet_of(m.epoch, m.index)
    return VerificationHistory(
        counts["CheckFailed"], counts["DisputeOpened"], counts["ClientConvicted"], out
    )
