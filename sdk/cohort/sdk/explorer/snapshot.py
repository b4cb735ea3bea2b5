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
