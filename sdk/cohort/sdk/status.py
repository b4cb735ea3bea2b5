"""What `cohort run status` shows: a pure summary of a run (also its `--json` form) and its rendering."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from solders.pubkey import Pubkey

from .coordinator_core import CoordinatorCore
from .models import Run, RunState
from .predict import elected_witnesses


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
