"""A run's state as the explorer keeps it: `cohort run status`'s summary (phase, time left, clients with
this round's role from the coordinator's own host build) plus what the pages show beside it: description,
config, model, checkpoint with its hash, and each client's points. Pure: no I/O."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..coordinator_core import CoordinatorCore
from ..models import Run
from ..status import summarize
from .decode import jsonable


def run_snapshot(run: Run, core: CoordinatorCore, now: int) -> dict[str, Any]:
    summary = summarize(run, core, now)
    points = {str(e.signer): e.earned for e in run.registry}
    for client in summary["clients"]:
        client["points"] = points.get(client["wallet"], 0)
    summary["read_at"] = now
    summary["halted"] = run.state.halted
    summary["description"] = run.metadata.description
    summary["client_version"] = run.metadata.client_version
    summary["num_parameters"] = run.metadata.num_parameters
    summary["config"] = jsonable(dataclasses.asdict(run.config))
    model = dataclasses.asdict(run.model)
    summary["model"] = jsonable(model)
    summary["checkpoint"]["sha256"] = run.model.checkpoint.weights_sha256.hex()
    summary["registry"] = [
        {"wallet": str(e.signer), "p2p_identity": str(e.p2p_identity), "points": e.earned,
         "pending": e.pending}
        for e in run.registry
    ]  # fmt: skip
    return summary


def closed_run_summary(
    address: str, facts: dict[str, Any], events: list[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    """The summary of a run that was closed before the explorer read its account, rebuilt from what the
    store holds: its events (phases, progress, members, checkpoint) and the facts its instructions carried
    (run id, name, total steps). Same keys as run_snapshot's; what no event tells is None or empty."""
    phase, epoch, step, changed_at = "Uninitialized", 0, 0, None
    checkpoint: dict[str, Any] = {
        "kind": "None",
        "repo": "",
        "revision": "",
        "step": 0,
        "sha256": "",
    }
    wallets: dict[str, str] = {}  # wallet -> p2p identity, in joining order
    points: dict[str, int] = {}
    for name, data in events:
        if name == "RunStateChanged":
            phase, epoch, step = data["to_state"], data["epoch"], data["step"]
            changed_at = data.get("timestamp")
        elif name == "CheckpointUpdated":
            c = data["checkpoint"]
            checkpoint = {"kind": c["kind"], "repo": c["repo"], "revision": c["revision"], "step": c["step"],
                          "sha256": c.get("weights_sha256", "")}  # fmt: skip
        elif name == "ClientJoined":
            wallets.setdefault(data["signer"], data["p2p_identity"])
        elif name == "PointsClaimed":
            points[data["wallet"]] = data["total"]
    config = facts.get("config") or {}
    return {
        "run_id": facts.get("run_id") or address,
        "address": address,
        "name": facts.get("name", ""),
        "description": facts.get("description", ""),
        "phase": phase,
        "halted": True,
        "rebuilt_from_events": True,  # the account was gone before the explorer read it
        "pending_pause": False,
        "epoch": epoch,
        "step": step,
        "total_steps": facts.get("total_steps"),
        "phase_started": changed_at,
        "phase_seconds_left": None,
        "round": None,
        "clients": [],
        "pending_joins": 0,
        "init_min_clients": config.get("init_min_clients"),
        "witnesses": {
            "elected": {},
            "submitted": 0,
            "needed": config.get("witness_nodes"),
            "quorum": None,
            "decided": False,
        },
        "checkpoint": checkpoint,
        "recent_loss": None,
        "authority": facts.get("authority"),
        "nonce": None,
        "config": config,
        "model": {},
        "registry": [
            {"wallet": w, "p2p_identity": p2p, "points": points.get(w, 0), "pending": False}
            for w, p2p in wallets.items()
        ],
    }
