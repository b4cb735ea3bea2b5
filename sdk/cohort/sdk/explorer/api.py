"""The JSON API's answers, built from the store (no HTTP here). Every answer carries the indexer's status,
so a page can say when the RPC is down and the data may be stale."""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from typing import Any

from . import links
from .indexer import IndexerStatus
from .store import Store
from .verification import NAMES, StoredEvent, VerificationHistory, history

DEFAULT_POINTS = 1000  # chart points per answer: more steps than this are averaged in buckets
MAX_POINTS = 5000
TIMELINE_EPOCHS = 5


class NotFound(LookupError):
    pass


class BadRequest(ValueError):
    pass


def _status(status: IndexerStatus) -> dict[str, Any]:
    return dataclasses.asdict(status)


def _find(store: Store, key: str) -> sqlite3.Row:
    row = store.find_run(key)
    if row is None:
        raise NotFound(f"no run {key!r} is indexed")
    return row


def _row_summary(row: sqlite3.Row) -> dict[str, Any]:
    summary = json.loads(row["summary"])
    if row["closed"]:
        summary["phase"] = "Closed"
    return summary


def runs(store: Store, status: IndexerStatus) -> dict[str, Any]:
    out = []
    for row in store.runs():
        s = _row_summary(row)
        out.append({
            "address": row["address"], "program": row["program"], "run_id": row["run_id"],
            "name": s["name"], "phase": s["phase"], "halted": s.get("halted", False) or bool(row["closed"]),
            "closed": bool(row["closed"]), "pending_pause": s["pending_pause"], "epoch": s["epoch"],
            "step": s["step"], "total_steps": s["total_steps"], "clients": len(s["clients"]),
            "pending_joins": s["pending_joins"], "latest_loss": row["latest_loss"],
            "last_activity": row["last_event"],
        })  # fmt: skip
    return {"runs": out, "indexer": _status(status)}


def run(store: Store, status: IndexerStatus, key: str, cluster_url: str) -> dict[str, Any]:
    row = _find(store, key)
    address = row["address"]
    s = _row_summary(row)
    checkpoint = s["checkpoint"]
    model = s.get("model", {})
    timeline = _timeline(store, address)
    rounds: dict[int, list[dict[str, Any]]] = {}
    for w in store.recent_rounds(address):
        rounds.setdefault(w["step"], []).append(
            {"signer": w["signer"], "index": w["client_index"], "loss": w["loss"],
             "tokens_per_sec": w["tokens_per_sec"], "block_time": w["block_time"]}
        )  # fmt: skip
    transactions = [
        {"signature": t["signature"], "slot": t["slot"], "block_time": t["block_time"],
         "err": t["err"], "instructions": json.loads(t["instructions"]),
         "explorer_url": links.transaction_url(t["signature"], cluster_url)}
        for t in store.transactions(address)
    ]  # fmt: skip
    rewards = {"rewards": s["rewards"]} if "rewards" in s else {}  # only runs with a treasury
    return {
        **rewards,
        "address": address,
        "program": row["program"],
        "run_id": row["run_id"],
        "closed": bool(row["closed"]),
        "state": s,
        "links": {
            "account": links.account_url(address, cluster_url),
            "checkpoint": links.checkpoint_url(
                checkpoint["kind"], checkpoint["repo"], checkpoint["revision"]
            ),
            "data_location": links.safe_http_url(model.get("data_location")),
        },
        "timeline": timeline,
        "recent_rounds": [{"step": step, "witnesses": ws} for step, ws in rounds.items()],
        "transactions": transactions,
        "verification": verification(store, address, s).to_json(),
        "indexer": _status(status),
    }


def verification(store: Store, address: str, state: dict[str, Any]) -> VerificationHistory:
    """Each member's checks failed, disputes and convictions, from the stored events. A member's wallet: from
    the events, the run's current members (this epoch), or who witnessed as that index in its epoch."""
    rows = store.verification_events(address, NAMES)
    events = [StoredEvent(r["id"], r["name"], json.loads(r["data"]), r["block_time"], r["signature"])
              for r in rows]  # fmt: skip
    starts = sorted((e.data["epoch"], e.id) for e in events if e.name == "RunStateChanged")
    current = {c["index"]: c["wallet"] for c in state.get("clients", [])}

    def wallet_of(epoch: int, index: int) -> str | None:
        if epoch == state.get("epoch") and index in current:
            return current[index]
        ids = [i for _, i in starts]
        at = next((k for k, (e, _) in enumerate(starts) if e == epoch), None)
        if at is None:
            return None
        return store.witness_signer(
            address, index, ids[at], ids[at + 1] if at + 1 < len(ids) else None
        )

    return history(events, wallet_of)


def _timeline(store: Store, address: str) -> list[dict[str, Any]]:
    """The phases of the last few epochs, from RunStateChanged events (oldest first)."""
    changes = [json.loads(r["data"]) | {"block_time": r["block_time"]}
               for r in store.events(address, name="RunStateChanged", limit=400)]  # fmt: skip
    changes.reverse()
    epochs: dict[int, list[dict[str, Any]]] = {}
    for c in changes:
        epochs.setdefault(c["epoch"], []).append(
            {"phase": c["to_state"], "from": c["from_state"], "at": c["timestamp"],
             "step": c["step"], "height": c["height"]}
        )  # fmt: skip
    recent = sorted(epochs)[-TIMELINE_EPOCHS:]
    return [{"epoch": e, "phases": epochs[e]} for e in recent]


def _int(query: dict[str, str], name: str, default: int | None, low: int, high: int) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {text[:40]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be from {low} to {high}, got {value}")
    return value


def metrics(store: Store, status: IndexerStatus, key: str, query: dict[str, str]) -> dict[str, Any]:
    """Witness metrics per step, `from`..`to` (inclusive), at most `points` points (bucket averages)."""
    row = _find(store, key)
    top = 2**32
    first = _int(query, "from", None, 0, top)
    last = _int(query, "to", None, 0, top)
    points = _int(query, "points", DEFAULT_POINTS, 1, MAX_POINTS) or DEFAULT_POINTS
    if first is not None and last is not None and first > last:
        raise BadRequest(f"from ({first}) is after to ({last})")
    span = store.step_range(row["address"])
    out: list[dict[str, Any]] = []
    bucket = 1
    if span is not None:
        first = span[0] if first is None else first
        last = span[1] if last is None else last
        bucket = max(1, math.ceil((last - first + 1) / points))
        out = [dataclasses.asdict(p) for p in store.metrics(row["address"], first, last, bucket)]
    return {"run_id": row["run_id"], "address": row["address"], "from": first, "to": last,
            "bucket": bucket, "points": out, "indexer": _status(status)}  # fmt: skip


def clients(store: Store, status: IndexerStatus, key: str) -> dict[str, Any]:
    row = _find(store, key)
    s = _row_summary(row)
    return {"run_id": row["run_id"], "address": row["address"], "phase": s["phase"],
            "epoch": s["epoch"], "clients": s["clients"], "registry": s.get("registry", []),
            "witnesses": s["witnesses"], "indexer": _status(status)}  # fmt: skip


def events(store: Store, status: IndexerStatus, key: str, query: dict[str, str]) -> dict[str, Any]:
    row = _find(store, key)
    limit = _int(query, "limit", 100, 1, 1000) or 100
    before = _int(query, "before", None, 1, 2**62)
    name = query.get("name") or None
    rows = store.events(row["address"], before=before, limit=limit, name=name)
    out = [{"id": r["id"], "name": r["name"], "signature": r["signature"], "slot": r["slot"],
            "block_time": r["block_time"], "data": json.loads(r["data"])} for r in rows]  # fmt: skip
    return {"run_id": row["run_id"], "address": row["address"], "events": out,
            "next_before": out[-1]["id"] if len(out) == limit else None,
            "indexer": _status(status)}  # fmt: skip
