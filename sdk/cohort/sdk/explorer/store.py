"""The explorer's SQLite database: indexed transactions, decoded events, witness metrics, and the latest
state of every run. WAL mode, so the server reads while the indexer writes; the schema carries a version.

Each transaction is written in one SQLite transaction together with the program's cursor (the newest
signature indexed), so a crash at any point leaves either all of a transaction's rows or none, and the
cursor never runs ahead of the rows. Signatures are unique: writing one twice changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .decode import DecodedTransaction

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS programs (
    program TEXT PRIMARY KEY,
    newest_signature TEXT,          -- the newest transaction indexed: the next catch-up stops there
    newest_slot INTEGER
);
CREATE TABLE IF NOT EXISTS transactions (
    seq INTEGER PRIMARY KEY,        -- chain order as indexed
    signature TEXT NOT NULL UNIQUE,
    program TEXT NOT NULL,
    slot INTEGER NOT NULL,
    block_time INTEGER,
    err TEXT,
    instructions TEXT NOT NULL      -- JSON list of instruction names
);
CREATE TABLE IF NOT EXISTS tx_runs (
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (run, seq)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    program TEXT NOT NULL,
    run TEXT,
    name TEXT NOT NULL,
    slot INTEGER NOT NULL,
    block_time INTEGER,
    data TEXT NOT NULL,
    UNIQUE (seq, ordinal)
);
CREATE INDEX IF NOT EXISTS events_by_run ON events (run, id);
CREATE TABLE IF NOT EXISTS witnesses (
    event_id INTEGER PRIMARY KEY,
    run TEXT NOT NULL,
    step INTEGER NOT NULL,
    signer TEXT NOT NULL,
    client_index INTEGER NOT NULL,
    loss REAL,
    tokens_per_sec REAL,
    bytes_sent INTEGER,
    bytes_received INTEGER,
    block_time INTEGER
);
CREATE INDEX IF NOT EXISTS witnesses_by_step ON witnesses (run, step);
CREATE TABLE IF NOT EXISTS runs (
    address TEXT PRIMARY KEY,
    program TEXT NOT NULL,
    run_id TEXT NOT NULL,
    summary TEXT NOT NULL,          -- JSON: the run's state when last read from the chain
    read_at INTEGER NOT NULL,       -- chain time of that read
    closed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS run_facts (
    run TEXT PRIMARY KEY,
    facts TEXT NOT NULL             -- JSON: what instructions said about the run (run id, name, total steps)
);
"""


class StoreError(RuntimeError):
    """The database cannot be used (another schema version, or not an explorer database)."""


@dataclass(frozen=True)
class MetricPoint:
    step: int
    loss: float | None
    loss_min: float | None
    loss_max: float | None
    tokens_per_sec: float | None
    bytes_sent: float | None
    bytes_received: float | None
    witnesses: int


class Store:
    """One database file. Safe to share between the indexer and the server inside one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(
                "PRAGMA synchronous=NORMAL"
            )  # WAL + NORMAL: a process crash loses no commit
            self.db.execute("PRAGMA busy_timeout=5000")
            self._migrate()
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise StoreError(f"{self.path} is not an explorer database ({e})") from e

    def _migrate(self) -> None:
        self.db.executescript(_SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {row[0]}; this explorer reads version "
                f"{SCHEMA_VERSION} (use a new --db file)"
            )

    def close(self) -> None:
        self.db.close()

    # -- meta ---------------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- the indexer's writes -----------------------------------------------------------------------
    def cursor(self, program: str) -> str | None:
        row = self.db.execute(
            "SELECT newest_signature FROM programs WHERE program = ?", (program,)
        ).fetchone()
        return None if row is None else row[0]

    def has_transaction(self, signature: str) -> bool:
        row = self.db.execute(
            "SELECT 1 FROM transactions WHERE signature = ?", (signature,)
        ).fetchone()
        return row is not None

    def add_transaction(self, program: str, tx: DecodedTransaction) -> bool:
        """Store one transaction and its events atomically, and move the program's cursor to it.
        False when the signature was already stored (nothing changes then but the cursor)."""
        with self._lock:
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            try:
                new = self._insert(program, tx)
                db.execute(
                    "INSERT INTO programs VALUES (?, ?, ?) ON CONFLICT(program) DO UPDATE SET "
                    "newest_signature = excluded.newest_signature, newest_slot = excluded.newest_slot",
                    (program, tx.signature, tx.slot),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return new

    def _insert(self, program: str, tx: DecodedTransaction) -> bool:
        db = self.db
        cur = db.execute(
            "INSERT OR IGNORE INTO transactions (signature, program, slot, block_time, err, instructions)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (tx.signature, program, tx.slot, tx.block_time, tx.err,
             json.dumps([ix.name for ix in tx.instructions])),
        )  # fmt: skip
        if cur.rowcount == 0:
            return False
        seq = cur.lastrowid
        db.executemany("INSERT OR IGNORE INTO tx_runs VALUES (?, ?)", [(r, seq) for r in tx.runs])
        for ix in tx.instructions if tx.err is None else ():  # a failed instruction said nothing
            if ix.run and ix.facts:
                row = db.execute("SELECT facts FROM run_facts WHERE run = ?", (ix.run,)).fetchone()
                facts = (
                    json.loads(row[0]) if row else {}
                ) | ix.facts  # stored oldest first: newest wins
                db.execute(
                    "INSERT OR REPLACE INTO run_facts VALUES (?, ?)", (ix.run, json.dumps(facts))
                )
        for e in tx.events:
            cur = db.execute(
                "INSERT INTO events (seq, ordinal, program, run, name, slot, block_time, data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (seq, e.ordinal, program, e.run, e.name, tx.slot, tx.block_time, json.dumps(e.data)),
            )  # fmt: skip
            if e.name == "WitnessSubmitted" and e.run:
                m = e.data.get("metadata") or {}
                # a witness may replace its record until the step is decided: the latest is what counts
                db.execute("DELETE FROM witnesses WHERE run = ? AND step = ? AND client_index = ?",
                           (e.run, e.data.get("step", 0), e.data.get("index", 0)))  # fmt: skip
                db.execute(
                    "INSERT INTO witnesses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (cur.lastrowid, e.run, e.data.get("step", 0), e.data.get("signer", ""),
                     e.data.get("index", 0), m.get("loss"), m.get("tokens_per_sec"),
                     m.get("bytes_sent"), m.get("bytes_received"), tx.block_time),
                )  # fmt: skip
        return True

    def put_run(
        self, address: str, program: str, run_id: str, summary: dict[str, Any], read_at: int
    ) -> bool:
        """Record a run's latest state; True when it differs from what was stored."""
        text = json.dumps(summary, sort_keys=True)
        with self._lock:
            row = self.db.execute(
                "SELECT summary, closed FROM runs WHERE address = ?", (address,)
            ).fetchone()
            if row is not None and row[0] == text and not row[1]:
                self.db.execute("UPDATE runs SET read_at = ? WHERE address = ?", (read_at, address))
                return False
            self.db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, 0)",
                (address, program, run_id, text, read_at),
            )
        return True

    def mark_closed(
        self, program: str, present: set[str], among: set[str] | None = None
    ) -> list[str]:
        """Runs of `program` (only those in `among`, when given) not in `present` are closed; returns the
        ones newly marked."""
        with self._lock:
            rows = self.db.execute(
                "SELECT address FROM runs WHERE program = ? AND closed = 0", (program,)
            ).fetchall()
            gone = [r[0] for r in rows if r[0] not in present and (among is None or r[0] in among)]
            self.db.executemany(
                "UPDATE runs SET closed = 1 WHERE address = ?", [(g,) for g in gone]
            )
        return gone

    def runs_known_only_from_events(
        self, program: str, present: set[str], among: set[str] | None = None
    ) -> list[str]:
        """Runs of `program` the coordinator logged events about that have no state here and are not on
        chain now (not in `present`): closed before the explorer ever read them."""
        rows = self.db.execute(
            "SELECT DISTINCT run FROM events WHERE program = ? AND run IS NOT NULL"
            " AND run NOT IN (SELECT address FROM runs)",
            (program,),
        ).fetchall()
        return sorted(
            r[0] for r in rows if r[0] not in present and (among is None or r[0] in among)
        )

    def run_history(self, run: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        """What is stored about a run: its facts (from instructions) and its events (name, data), oldest
        first."""
        row = self.db.execute("SELECT facts FROM run_facts WHERE run = ?", (run,)).fetchone()
        events = self.db.execute("SELECT name, data FROM events WHERE run = ? ORDER BY id", (run,))
        return (json.loads(row[0]) if row else {}), [(n, json.loads(d)) for n, d in events]

    def put_closed_run(
        self, address: str, program: str, run_id: str, summary: dict[str, Any], read_at: int
    ) -> bool:
        """Record a run rebuilt from its history as closed (never over a state read from the chain)."""
        with self._lock:
            cur = self.db.execute(
                "INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, 1)",
                (address, program, run_id, json.dumps(summary, sort_keys=True), read_at),
            )
        return cur.rowcount == 1

    # -- reads --------------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        return {
            table: self.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("transactions", "events", "witnesses", "runs")
        }

    def runs(self) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT r.*, (SELECT max(e.block_time) FROM events e WHERE e.run = r.address) AS last_event,"
            " (SELECT w.loss FROM witnesses w WHERE w.run = r.address ORDER BY w.event_id DESC LIMIT 1)"
            " AS latest_loss FROM runs r ORDER BY r.run_id"
        ).fetchall()

    def find_run(self, key: str) -> sqlite3.Row | None:
        """A run by address, else by run id (the open one first, then the newest)."""
        row = self.db.execute("SELECT * FROM runs WHERE address = ?", (key,)).fetchone()
        if row is not None:
            return row
        return self.db.execute(
            "SELECT * FROM runs WHERE run_id = ? ORDER BY closed, read_at DESC LIMIT 1", (key,)
        ).fetchone()

    def events(
        self, run: str, *, before: int | None = None, limit: int = 100, name: str | None = None
    ) -> list[sqlite3.Row]:
        sql = (
            "SELECT e.id, e.name, e.slot, e.block_time, e.data, t.signature FROM events e"
            " JOIN transactions t ON t.seq = e.seq WHERE e.run = ?"
        )
        args: list[Any] = [run]
        if before is not None:
            sql += " AND e.id < ?"
            args.append(before)
        if name is not None:
            sql += " AND e.name = ?"
            args.append(name)
        sql += " ORDER BY e.id DESC LIMIT ?"
        args.append(limit)
        return self.db.execute(sql, args).fetchall()

    def verification_events(self, run: str, names: tuple[str, ...]) -> list[sqlite3.Row]:
        """The run's events named `names` and the RunStateChanged that started each epoch (to Warmup), oldest
        first: (id, name, block_time, data, signature)."""
        marks = ", ".join("?" for _ in names)
        return self.db.execute(
            "SELECT e.id, e.name, e.block_time, e.data, t.signature FROM events e"
            " JOIN transactions t ON t.seq = e.seq WHERE e.run = ? AND (e.name IN (" + marks + ")"
            " OR (e.name = 'RunStateChanged' AND json_extract(e.data, '$.to_state') = 'Warmup'))"
            " ORDER BY e.id",
            (run, *names),
        ).fetchall()

    def witness_signer(self, run: str, index: int, after: int, before: int | None) -> str | None:
        """The wallet that witnessed as epoch client `index` between event ids `after` and `before` (one
        epoch), or None: it never witnessed there."""
        row = self.db.execute(
            "SELECT signer FROM witnesses WHERE run = ? AND client_index = ? AND event_id > ?"
            " AND event_id < ? LIMIT 1",
            (run, index, after, 2**62 if before is None else before),
        ).fetchone()
        return row[0] if row else None

    def all_events(self) -> list[tuple[str, int, str, str | None, str]]:
        """Every event as (signature, ordinal, name, run, data) in chain order (tests and tools)."""
        return [
            tuple(r)
            for r in self.db.execute(
                "SELECT t.signature, e.ordinal, e.name, e.run, e.data FROM events e"
                " JOIN transactions t ON t.seq = e.seq ORDER BY e.id"
            )
        ]

    def transactions(self, run: str, limit: int = 50) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT t.* FROM tx_runs x JOIN transactions t ON t.seq = x.seq WHERE x.run = ?"
            " ORDER BY t.seq DESC LIMIT ?",
            (run, limit),
        ).fetchall()

    def step_range(self, run: str) -> tuple[int, int] | None:
        row = self.db.execute(
            "SELECT min(step), max(step) FROM witnesses WHERE run = ?", (run,)
        ).fetchone()
        return None if row[0] is None else (row[0], row[1])

    def metrics(self, run: str, first: int, last: int, bucket: int) -> list[MetricPoint]:
        """Witness metrics per step in [first, last], averaged over buckets of `bucket` steps."""
        rows = self.db.execute(
            "SELECT min(step) AS step, avg(loss), min(loss), max(loss), avg(tokens_per_sec),"
            " avg(bytes_sent), avg(bytes_received), count(*) FROM witnesses"
            " WHERE run = ? AND step BETWEEN ? AND ? GROUP BY (step - ?) / ? ORDER BY step",
            (run, first, last, first, bucket),
        ).fetchall()
        return [MetricPoint(*tuple(r)) for r in rows]

    def recent_rounds(self, run: str, limit: int = 10) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT step, signer, client_index, loss, tokens_per_sec, block_time FROM witnesses"
            " WHERE run = ? AND step IN (SELECT DISTINCT step FROM witnesses WHERE run = ?"
            " ORDER BY step DESC LIMIT ?) ORDER BY step DESC, event_id",
            (run, run, limit),
        ).fetchall()
