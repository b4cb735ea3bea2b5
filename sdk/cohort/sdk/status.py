"""What `cohort run status` shows: a pure summary of a run (also its `--json` form) and its rendering."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from solders.pubkey import Pubkey

from .coordinator_core import CoordinatorCore
from .models import Run, RunState
from .predict import elected_witnesses

CHECKING = (RunState.RoundTrain, RunState.RoundWitness, RunState.Cooldown)


@dataclass(frozen=True)
class OpenCheck:
    """An open tally of failure reports against a member: its check of `step` can still open a dispute."""

    step: int
    reports: int  # verifiers that reported a failure so far
    verifiers: int  # the check's verifiers: a strict majority of them opens a dispute
    disputed: bool  # the majority reported: a dispute of (step, member) opened


@dataclass(frozen=True)
class OpenDispute:
    """An open dispute of a member's `step`: its committee replays the check; a strict majority decides."""

    step: int
    fails: int
    passes: int
    committee: int | None  # None: the seed that draws it (round of seed_step) is not revealed yet
    seed_step: int


@dataclass(frozen=True)
class MemberChecks:
    """One member of the epoch as verification sees it now."""

    index: int
    wallet: str
    failed_checks: list[OpenCheck]
    disputes: list[OpenDispute]
    convicted: bool
    banned_until: (
        int | None
    )  # the registry's: the first epoch its wallet may join again (None: not banned)

    @property
    def shown(self) -> bool:
        return bool(self.failed_checks or self.disputes or self.convicted or self.banned_until)


@dataclass(frozen=True)
class BannedWallet:
    wallet: str
    banned_until: int


@dataclass(frozen=True)
class Verification:
    """What the chain holds now about checks: open tallies and disputes (of the run-wide maxima), per member
    of the epoch, and the wallets a conviction bars from joining."""

    open_checks: int
    check_slots: int  # CHECK_SLOTS: tallies open at once
    open_disputes: int
    max_disputes: int  # MAX_DISPUTES
    members: list[MemberChecks]
    banned: list[BannedWallet]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Verification:
        members = [
            MemberChecks(**{**m, "failed_checks": [OpenCheck(**c) for c in m["failed_checks"]],
                            "disputes": [OpenDispute(**d) for d in m["disputes"]]})
            for m in value["members"]
        ]  # fmt: skip
        banned = [BannedWallet(**b) for b in value["banned"]]
        return cls(**{**value, "members": members, "banned": banned})


def verification(run: Run, core: CoordinatorCore) -> Verification:
    """The open tallies and disputes the Run holds (a slot may hold an expired tally or a lapsed dispute:
    open as the program decides it), convictions, and the registry's bans."""
    constants = core.idl.constants
    data = run.data[8:]
    convicted = {c.index for c in run.clients if c.state == "Convicted"}

    def live(trainer: int) -> bool:
        return trainer < len(run.clients) and trainer not in convicted

    checks: dict[int, list[OpenCheck]] = {}
    disputes: dict[int, list[OpenDispute]] = {}
    if run.state in CHECKING and run.current_round is not None:
        current = run.check_step
        for d in run.dispute_tallies:
            if live(d.trainer) and current <= d.step + constants["DISPUTE_HORIZON"]:
                committee = core.dispute_committee(data, d.step, d.trainer)
                disputes.setdefault(d.trainer, []).append(OpenDispute(
                    d.step, len(d.fails), len(d.passes), len(committee) or None, d.seed_step))  # fmt: skip
        for t in run.failed_checks:
            seed = core.check_seed(data, t.step) if live(t.trainer) else None
            if seed is None:
                continue  # expired (its seed left the window), or its trainer was convicted
            verifiers = len(core.check_plan(data, t.step, seed, t.trainer))
            disputed = any(d.step == t.step for d in disputes.get(t.trainer, ()))
            checks.setdefault(t.trainer, []).append(
                OpenCheck(t.step, t.reports, verifiers, disputed)
            )
    joining = run.progress.epoch + (1 if run.state in (RunState.Warmup, *CHECKING) else 0)
    bans = {e.signer: e.banned_until for e in run.registry if e.banned_until > joining}
    members = [
        MemberChecks(c.index, str(c.signer), checks.get(c.index, []), disputes.get(c.index, []),
                     c.index in convicted, bans.get(c.signer))
        for c in run.clients
    ]  # fmt: skip
    return Verification(
        open_checks=sum(map(len, checks.values())),
        check_slots=constants["CHECK_SLOTS"],
        open_disputes=sum(map(len, disputes.values())),
        max_disputes=constants["MAX_DISPUTES"],
        members=members,
        banned=[BannedWallet(str(w), until) for w, until in bans.items()],
    )


def summarize(
    run: Run, core: CoordinatorCore, now: int, recent_loss: float | None = None
) -> dict[str, Any]:
    """A JSON-ready summary of `run` at chain time `now`."""
    config = run.config
    timeout = run.phase_timeout()
    pending = sum(1 for e in run.registry if e.pending)
    if run.state == RunState.WaitingForMembers and pending < config.init_min_clients:
        timeout = None  # the wait only starts counting once enough members joined
    left = None if timeout is None else max(0, run.run_state_start + timeout - now)
    elected = elected_witnesses(core, run)  # the seats
    round_ = run.current_round
    # from the round summary (in the hot prefix): right for a Run read without its witness records too
    submitted = {
        c.index
        for c in run.clients
        if round_ and round_.witnessed_mask[c.index // 8] >> (c.index % 8) & 1
    }
    in_epoch = run.state not in (RunState.WaitingForMembers, *(s for s in RunState if s.halted))
    checks = verification(run, core)
    if not in_epoch:  # no epoch: no members to show (bans outlive it)
        checks = dataclasses.replace(checks, members=[])
    clients = []
    if in_epoch:
        for c in run.clients:
            training = run.round_active and round_ is not None and round_.active(c.index)
            role = "witness" if c.index in elected else "trainer" if training else "-"
            if run.state == RunState.Warmup:
                role = "loading"
            clients.append(
                {"index": c.index, "wallet": str(c.signer), "p2p_identity": str(c.p2p_identity),
                 "health": c.state, "role": role, "witnessed": c.index in submitted}
            )  # fmt: skip
    checkpoint = run.model.checkpoint
    return {
        "run_id": run.run_id,
        "address": str(run.address),
        "name": run.metadata.name,
        "phase": str(run.state),
        "pending_pause": run.pending_pause,
        "epoch": run.progress.epoch,
        "step": run.progress.step,
        "total_steps": config.total_steps,
        "phase_started": run.run_state_start,
        "phase_seconds_left": left,
        "round": None
        if round_ is None or not run.round_active
        else {
            "height": round_.height,
            "batch_size": round_.batch_size,
            "data_index": round_.data_index,
        },
        "clients": clients,
        "pending_joins": pending,
        "init_min_clients": config.init_min_clients,
        "witnesses": {
            "elected": {str(i): p for i, p in sorted(elected.items())},  # epoch index -> seat
            "submitted": len(submitted),
            "needed": config.witness_nodes,  # seats
            "quorum": core.quorum(
                config.witness_nodes
            ),  # records behind one results root that decide
            "decided": bool(round_ and run.round_active and round_.decided),
        },
        "checkpoint": {
            "kind": checkpoint.kind,
            "repo": checkpoint.repo,
            "revision": checkpoint.revision,
            "step": checkpoint.step,
        },
        "recent_loss": recent_loss,
        "verification": checks.to_json(),
        "authority": str(run.authority),
        "nonce": run.nonce,
    }


def latest_loss(idl: Any, program_id: Pubkey | str, logs: list[list[str]]) -> float | None:
    """The loss reported by the most recent witness in these transaction logs (newest first), counting
    only events the coordinator `program_id` itself logged."""
    for lines in logs:
        for name, event in reversed(idl.events_in_logs(lines, program_id)):
            if name == "WitnessSubmitted":
                return round(event["metadata"]["loss"], 4)
    return None


def render(status: dict[str, Any], console: Console) -> None:
    left = status["phase_seconds_left"]
    phase = status["phase"] + (" (pause pending)" if status["pending_pause"] else "")
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("run", f"{status['run_id']}  {status['name']}")
    head.add_row("address", status["address"])
    head.add_row("phase", phase + ("" if left is None else f"  ({left} s left)"))
    head.add_row("epoch", str(status["epoch"]))
    head.add_row("step", f"{status['step']} / {status['total_steps']}")
    if status["round"]:
        r = status["round"]
        head.add_row(
            "round", f"height {r['height']}, {r['batch_size']} sequences from #{r['data_index']}"
        )
    w = status["witnesses"]
    decided = ", step decided" if w.get("decided") else ""
    head.add_row("witnesses", f"{w['submitted']} of {w['needed']} seats reported (a majority of {w['quorum']} "
                              f"decides{decided})")  # fmt: skip
    ck = status["checkpoint"]
    revision = f"@{ck['revision']}" if ck["revision"] else ""
    head.add_row("checkpoint", f"{ck['kind']} {ck['repo']}{revision} (step {ck['step']})")
    loss = status["recent_loss"]
    head.add_row("recent loss", "-" if loss is None else f"{loss:.4f}")
    head.add_row(
        "joined for next epoch",
        f"{status['pending_joins']} (starts with {status['init_min_clients']})",
    )
    checks = Verification.from_json(status["verification"]) if "verification" in status else None
    shown = [m for m in checks.members if m.shown] if checks else []
    if checks and (checks.open_checks or checks.open_disputes or shown or checks.banned):
        head.add_row("checks", checks_line(checks))
    console.print(head)
    if status["clients"]:
        table = Table("#", "wallet", "health", "role this round", "witnessed")
        for c in status["clients"]:
            table.add_row(
                str(c["index"]),
                c["wallet"],
                c["health"],
                c["role"],
                "yes" if c["witnessed"] else "",
            )
        console.print(table)
    # the members checks name (by their # above), then banned wallets that are not members now
    lines = [f"  #{m.index}: {member_checks(m)}" for m in shown]
    members = {m.wallet for m in shown}
    lines += [f"  {b.wallet}: banned until epoch {b.banned_until}"
              for b in (checks.banned if checks else ()) if b.wallet not in members]  # fmt: skip
    if lines:
        console.print("checks", style="bold")
        for line in lines:
            console.print(line, soft_wrap=True, highlight=False, markup=False)


def checks_line(v: Verification) -> str:
    """The run-wide counts, of the maxima: "open: 1/16 check tallies, 0/4 disputes; 1 convicted"."""
    convicted = sum(m.convicted for m in v.members)
    return (f"open: {v.open_checks}/{v.check_slots} check tallies, {v.open_disputes}/{v.max_disputes} disputes"
            + (f"; {convicted} convicted" if convicted else ""))  # fmt: skip


def member_checks(m: MemberChecks) -> str:
    """One member's cell: "check s5 1/2 failed; dispute s5 1 fail 0 pass of 2; convicted, banned until 3"."""
    parts = [
        f"check s{c.step} {c.reports}/{c.verifiers} failed"
        for c in m.failed_checks
        if not c.disputed
    ]
    for d in m.disputes:
        committee = "committee not drawn yet" if d.committee is None else f"of {d.committee}"
        parts.append(f"dispute s{d.step} {d.fails} fail {d.passes} pass {committee}")
    if m.convicted or m.banned_until:
        ban = f"banned until epoch {m.banned_until}" if m.banned_until else ""
        parts.append(", ".join(p for p in ("convicted" if m.convicted else "", ban) if p))
    return "; ".join(parts)
