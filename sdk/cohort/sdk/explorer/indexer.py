"""The indexer: follows coordinator programs on any cluster and writes what they did into the store.

One catch-up is the whole algorithm: list the program's signatures newer than the cursor
(`getSignaturesForAddress` with `until`, paged with `before`), fetch them (`getTransaction`, a few at a
time) and store them oldest first, each with the cursor in one SQLite transaction; then re-read the runs
the new transactions touched. The first catch-up is the backfill; afterwards a websocket `logsSubscribe`
(mentions: the program) wakes the loop at once, and a poll every few seconds covers a lost socket.
When the RPC fails, the failure is shown in `status` and the loop retries with exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from solders.pubkey import Pubkey

from ..client import RunClient
from ..coordinator_core import CoordinatorCore
from ..errors import CohortError, RpcRefused, RpcUnavailable
from ..idl import IdlError
from ..models import Run
from ..rpc import Rpc
from .decode import decode_transaction
from .snapshot import closed_run_summary, run_snapshot
from .store import Store

log = logging.getLogger("cohort.sdk.explorer")

PAGE = 1000  # signatures per getSignaturesForAddress call (the RPC maximum)
BATCH = 32  # getTransaction calls per JSON-RPC batch
FETCH_CONCURRENCY = 4  # batches in flight
MAX_BACKOFF = 30.0


@dataclass
class IndexerStatus:
    """What the API reports about the indexer (`/api/status`)."""

    rpc_url: str
    rpc_ok: bool = False
    error: str | None = None
    failing_since: float | None = None
    retry_in: float | None = None
    last_ok: float | None = None
    caught_up: bool = False
    live: bool = False  # the websocket subscription is up
    transactions_indexed: int = 0
    warning: str | None = None


class Indexer:
    def __init__(
        self,
        store: Store,
        rpc: Rpc,
        program_ids: Sequence[Pubkey],
        *,
        ws_url: str | None = None,
        core: CoordinatorCore | None = None,
        poll_interval: float = 3.0,
        max_backoff: float = MAX_BACKOFF,
        on_change: Callable[[set[str]], None] = lambda _: None,
        treasurer_id: Pubkey | None = None,
    ) -> None:
        if not program_ids:
            raise ValueError("the indexer needs at least one program id")
        self.store, self.rpc, self.ws_url = store, rpc, ws_url
        self.core = core or CoordinatorCore()
        self.idl = self.core.idl
        self.programs = [str(p) for p in program_ids]
        self.clients = {str(p): RunClient(rpc, p, idl=self.idl) for p in program_ids}
        # the treasurer whose treasuries are shown with their runs (None: no rewards shown)
        self.treasurer_id = treasurer_id
        self._treasurer_seen: str | None = (
            None  # its newest transaction when the runs were last read
        )
        self.poll_interval, self.max_backoff = poll_interval, max_backoff
        self.on_change = on_change
        self.status = IndexerStatus(rpc.url)
        self._wake = asyncio.Event()
        self._checked_cursor: set[str] = set()
        self._batches = True  # until the RPC refuses a JSON-RPC batch

    # -- one catch-up ---------------------------------------------------------------------------------
    async def catch_up(self) -> int:
        """Index everything new on every program; returns the number of transactions stored."""
        stored = 0
        treasurer_newest = await self._treasurer_newest()
        rewards_moved = treasurer_newest != self._treasurer_seen
        for program in self.programs:
            touched: set[str] = set()
            signatures = await self._new_signatures(program)
            for start in range(0, len(signatures), BATCH * FETCH_CONCURRENCY):
                chunk = signatures[start : start + BATCH * FETCH_CONCURRENCY]
                fetched = await self._fetch_all([s["signature"] for s in chunk])
                for signature, result in fetched:
                    if result is None:  # listed but not retrievable yet: stop here, retry later
                        raise RpcUnavailable(f"transaction {signature} is listed but not served")
                    tx = decode_transaction(self.idl, program, signature, result)
                    if self.store.add_transaction(program, tx):
                        stored += 1
                        touched |= tx.runs
            if program not in self._checked_cursor:  # first catch-up: every run, closed ones found
                touched |= await self.refresh_runs(program)
                self._checked_cursor.add(program)
            elif rewards_moved:  # a fund, claim, stake or slash: the runs' rewards are re-read
                touched |= await self.refresh_runs(program)
            elif touched:
                touched |= await self.refresh_runs(program, touched)
            if touched:
                self.on_change(touched)
        self._treasurer_seen = treasurer_newest  # only once the runs were read again
        self.status.transactions_indexed += stored
        return stored

    async def _treasurer_newest(self) -> str | None:
        """The treasurer's newest transaction: when it differs from the one seen at the last catch-up, the
        runs are read again (a claim or a funding is no coordinator transaction, so nothing else tells)."""
        if self.treasurer_id is None:
            return None
        newest = await self.rpc.raw_request(
            "getSignaturesForAddress", [str(self.treasurer_id), {"limit": 1}]
        )
        return newest[0]["signature"] if newest else None

    async def _rewards(self, client: RunClient, run: Run) -> dict | None:
        """The run's treasury and members' rewards as JSON (None: no treasurer configured, or no treasury)."""
        if self.treasurer_id is None:
            return None
        from ..rewards import RewardsError, rewards_status
        from ..treasurer import Treasurer

        settled = {}
        for points in await client.points(run.address):
            settled[points.wallet] = (points.claimed, points.unclaimed)
        treasurer = Treasurer(self.treasurer_id, client.program_id)
        try:
            status = await rewards_status(self.rpc, treasurer, run.address, settled)
        except (
            IdlError,
            ValueError,
            RewardsError,
        ) as e:  # another coordinator's treasury, or layout
            log.warning("the treasury of run %s is not shown: %s", run.address, e)
            return None
        return None if status is None else status.to_json()

    async def _new_signatures(self, program: str) -> list[dict]:
        """Signatures newer than the cursor, oldest first (successful or not)."""
        until = self.store.cursor(program)
        if until is not None and program not in self._checked_cursor:
            statuses = await self.rpc.raw_request(
                "getSignatureStatuses", [[until], {"searchTransactionHistory": True}]
            )
            if statuses["value"][0] is None:
                self.status.warning = (
                    f"the cluster no longer knows the last transaction indexed for {program} "
                    "(a reset localnet or pruned history): indexing what it has now"
                )
                log.warning("%s", self.status.warning)
                until = None
        out: list[dict] = []
        before = None
        while True:
            config: dict = {"limit": PAGE}
            if until is not None:
                config["until"] = until
            if before is not None:
                config["before"] = before
            page = await self.rpc.raw_request("getSignaturesForAddress", [program, config])
            out.extend(page)
            if len(page) < PAGE:
                break
            before = page[-1]["signature"]
        out.reverse()
        return [s for s in out if not self.store.has_transaction(s["signature"])]

    async def _fetch_all(self, signatures: list[str]) -> list[tuple[str, dict | None]]:
        """getTransaction for each signature: JSON-RPC batches a few at a time (single calls for an RPC
        that refuses batches)."""
        config = {
            "encoding": "base64",
            "maxSupportedTransactionVersion": 0,
            "commitment": "confirmed",
        }
        limit = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def fetch(batch: list[str]) -> list[dict | None]:
            async with limit:
                if self._batches:
                    try:
                        return await self.rpc.raw_batch(
                            "getTransaction", [[s, config] for s in batch]
                        )
                    except RpcRefused as e:
                        log.info(
                            "the RPC refuses JSON-RPC batches (%s): one call per transaction", e
                        )
                        self._batches = False
                return [await self.rpc.raw_request("getTransaction", [s, config]) for s in batch]

        batches = [signatures[i : i + BATCH] for i in range(0, len(signatures), BATCH)]
        results = await asyncio.gather(*(fetch(b) for b in batches))
        return [(s, r) for batch, answer in zip(batches, results, strict=True)
                for s, r in zip(batch, answer, strict=True)]  # fmt: skip

    async def refresh_runs(self, program: str, only: set[str] | None = None) -> set[str]:
        """Re-read the runs of `program` (all of them, or the addresses in `only`); returns the addresses
        whose state changed or that were closed."""
        client = self.clients[program]
        now = await self.rpc.unix_time()
        run_type = self.idl.accounts["Run"]
        if only is None:
            accounts = await self.rpc.program_accounts(
                client.program_id, discriminator=run_type, size=self.idl.account_size("Run")
            )
        else:
            accounts = []
            for text in sorted(only):
                address = Pubkey.from_string(text)
                found = await self.rpc.account_owner_and_data(address)
                if found is not None and found[0] == client.program_id and found[1][:8] == run_type:
                    accounts.append((address, found[1]))
        changed: set[str] = set()
        present: set[str] = set()
        for address, data in accounts:
            present.add(str(address))
            try:
                run = Run.decode(address, data, self.idl)
                snapshot = run_snapshot(run, self.core, now)
            except (IdlError, ValueError) as e:  # a program whose layout is not this IDL's
                log.warning("run %s does not decode with this IDL: %s", address, e)
                continue
            rewards = await self._rewards(client, run)
            if rewards is not None:  # a run without a treasury keeps the summary it always had
                snapshot["rewards"] = rewards
            if self.store.put_run(str(address), program, run.run_id, snapshot, now):
                changed.add(str(address))
        gone = self.store.mark_closed(program, present, among=only)
        rebuilt = set()
        for address in self.store.runs_known_only_from_events(program, present, among=only):
            summary = closed_run_summary(address, *self.store.run_history(address))
            if self.store.put_closed_run(address, program, summary["run_id"], summary, now):
                rebuilt.add(address)
        return changed | set(gone) | rebuilt

    # -- the loop -------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Follow the programs until cancelled."""
        listener = asyncio.create_task(self._listen()) if self.ws_url else None
        backoff = 0.5
        try:
            while True:
                self._wake.clear()
                try:
                    await self.catch_up()
                except Exception as e:  # the loop outlives every failure; each one is reported
                    if not isinstance(e, CohortError | OSError | TimeoutError | ValueError):
                        log.exception("indexer: unexpected failure")
                    self._failed(e, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                backoff = 0.5
                self._ok()
                interval = self.poll_interval * (3 if self.status.live else 1)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), interval)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener

    def _ok(self) -> None:
        if not self.status.rpc_ok and self.status.error:
            log.info("RPC %s is back; indexer caught up", self.rpc.url)
        s = self.status
        s.rpc_ok, s.error, s.failing_since, s.retry_in = True, None, None, None
        s.last_ok, s.caught_up = time.time(), True

    def _failed(self, exc: Exception, retry_in: float) -> None:
        s = self.status
        if s.rpc_ok or s.error is None:
            log.warning("indexer: %s (retrying with backoff)", exc)
        s.rpc_ok, s.caught_up = False, False
        s.error = str(exc) or type(exc).__name__
        s.failing_since = s.failing_since or time.time()
        s.retry_in = retry_in
        self.on_change(set())  # pages learn the indexer is failing

    async def _listen(self) -> None:
        """Wake the loop on every logs notification that mentions a program; reconnect with backoff."""
        backoff = 0.5
        while True:
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.ws_connect(self.ws_url, heartbeat=20, max_msg_size=1 << 20) as ws,
                ):
                    for i, program in enumerate(self.programs):
                        await ws.send_str(json.dumps({
                            "jsonrpc": "2.0", "id": i + 1, "method": "logsSubscribe",
                            "params": [{"mentions": [program]}, {"commitment": "confirmed"}],
                        }))  # fmt: skip
                    self.status.live = True
                    backoff = 0.5
                    self._wake.set()  # anything sent while we were not subscribed
                    async for message in ws:
                        if message.type != aiohttp.WSMsgType.TEXT:
                            break
                        if '"logsNotification"' in message.data:
                            self._wake.set()
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                log.debug("logsSubscribe: %s", e)
            self.status.live = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)
