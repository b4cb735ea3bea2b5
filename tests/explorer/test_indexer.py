"""The indexer against a real localnet: every event stored once, kill -9 and restart with no gap or
duplicate, a redeployed program and a second one, and an RPC that goes away and comes back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import httpx2
from solders.pubkey import Pubkey

from cohort.sdk.explorer import Explorer
from cohort.sdk.explorer.indexer import Indexer
from cohort.sdk.explorer.store import Store


async def until(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stored_events(db: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT t.signature, e.name FROM events e JOIN transactions t ON t.seq = e.seq ORDER BY e.id"
        )]  # fmt: skip


def count(db: Path, table: str) -> int:
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


async def test_every_event_is_decoded_and_stored_once(chain, tmp_path):
    await chain.create_run("indexed")
    await chain.play("indexed", await chain.members())
    expected = await chain.expected_events(chain.program_id)
    assert {name for _, name in expected} >= {"RunStateChanged", "ClientJoined", "WitnessSubmitted"}

    store = Store(tmp_path / "explorer.sqlite")
    indexer = Indexer(store, chain.rpc, [chain.program_id], core=chain.core)
    assert await indexer.catch_up() > 0
    assert stored_events(store.path) == expected
    assert await indexer.catch_up() == 0, "a second catch-up found something new"
    assert stored_events(store.path) == expected
    witnesses = store.db.execute("SELECT count(*), count(DISTINCT step) FROM witnesses").fetchone()
    assert tuple(witnesses) == (
        sum(1 for _, n in expected if n == "WitnessSubmitted"),
        2,
    )  # a round and its flush
    (run,) = store.runs()
    assert run["run_id"] == "indexed" and not run["closed"]
    store.close()


def start_explorer(chain, db: Path, cwd: Path) -> asyncio.subprocess.Process:
    command = [sys.executable, "-c", "from cohort.sdk.cli import main; main()", "explorer",
               "--cluster", chain.net.http_url, "--ws-url", chain.net.ws_url,
               "--program-id", str(chain.program_id), "--db", str(db), "--port", "0",
               "--poll-interval", "0.5"]  # fmt: skip
    return asyncio.create_subprocess_exec(
        *command, cwd=cwd, start_new_session=True,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def stop(process: asyncio.subprocess.Process, sig: int = signal.SIGKILL) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        await asyncio.wait_for(process.wait(), 20)


async def test_kill_9_and_restart_resume_with_no_gap_and_no_duplicate(chain, tmp_path):
    await chain.create_run("crashy")
    members = await chain.members()
    for _ in range(3):
        await chain.play("crashy", members)
    signatures = await chain.rpc.raw_request(
        "getSignaturesForAddress", [str(chain.program_id), {"limit": 1000}]
    )
    total = len(signatures)
    expected = await chain.expected_events(chain.program_id)

    db = tmp_path / "explorer.sqlite"
    mid_way = []
    for _ in range(4):  # kill while it backfills; a fast machine may finish first: try again
        for leftover in tmp_path.glob("explorer.sqlite*"):
            leftover.unlink()
        process = await start_explorer(chain, db, tmp_path)
        try:
            await until(lambda: count(db, "transactions") > 0, 60, "the first indexed transaction",
                        interval=0.002)  # fmt: skip
        finally:
            await stop(process)
        mid_way.append(count(db, "transactions"))
        if mid_way[-1] < total:
            break
    assert mid_way[-1] < total, f"every kill came after the backfill ({mid_way} of {total})"

    process = await start_explorer(chain, db, tmp_path)
    try:
        await until(lambda: count(db, "transactions") == total, 60, "the restart to catch up")
        assert stored_events(db) == expected, "events lost or duplicated across kill -9"
        # live: a new epoch while it runs arrives with nothing missing
        await chain.play("crashy", members)
        expected = await chain.expected_events(chain.program_id)
        await until(lambda: len(stored_events(db)) >= len(expected), 30, "the live events")
        assert stored_events(db) == expected
    finally:
        await stop(process, signal.SIGTERM)


async def test_program_upgrade_and_a_second_program_are_both_followed(chain, tmp_path):
    await chain.create_run("before-upgrade")
    members = await chain.members()
    await chain.play("before-upgrade", members)
    store = Store(tmp_path / "explorer.sqlite")
    second_id = await chain.deploy(tmp_path / "second-keypair.json")
    indexer = Indexer(store, chain.rpc, [chain.program_id, second_id], core=chain.core)
    await indexer.catch_up()
    before = len(store.all_events())

    await asyncio.sleep(0.5)  # an upgrade may not land in the deploy's slot
    assert await chain.deploy(chain.program_keypair) == chain.program_id  # upgraded in place
    await chain.play("before-upgrade", members)
    second = type(chain.client)(chain.rpc, second_id, ws_url=chain.net.ws_url, idl=chain.core.idl)
    await chain.create_run("on-second", client=second)
    await chain.play("on-second", members, client=second)
    await indexer.catch_up()

    first_expected = await chain.expected_events(chain.program_id)
    second_expected = await chain.expected_events(second_id)
    rows = store.all_events()
    assert len(rows) == len(first_expected) + len(second_expected) > before
    assert {(r[0], r[2]) for r in rows} == set(first_expected) | set(second_expected)
    names = [r["instructions"] for r in store.db.execute("SELECT instructions FROM transactions")]
    assert any("loader:upgrade" in n for n in names), "the upgrade transaction is not listed"
    runs = {r["run_id"]: r["program"] for r in store.runs()}
    assert runs == {"before-upgrade": str(chain.program_id), "on-second": str(second_id)}
    store.close()


class TcpProxy:
    """A real TCP forwarder that can be switched off (the RPC "goes down") and on again, same port."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.pipes: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.pipes):
            task.cancel()
        await asyncio.gather(*self.pipes, return_exceptions=True)
        await self.server.wait_closed()

    async def _serve(self, reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def pipe(src, dst) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        for task in (asyncio.create_task(pipe(reader, up_writer)),
                     asyncio.create_task(pipe(up_reader, writer))):  # fmt: skip
            self.pipes.add(task)
            task.add_done_callback(self.pipes.discard)


async def test_rpc_down_is_reported_and_the_indexer_catches_up_when_it_returns(chain, tmp_path):
    await chain.create_run("flaky")
    members = await chain.members()
    await chain.play("flaky", members)
    proxy = TcpProxy(int(chain.net.http_url.rsplit(":", 1)[1]))
    await proxy.start()
    url = f"http://127.0.0.1:{proxy.port}"
    async with (
        Explorer(url, None, chain.program_id, tmp_path / "explorer.sqlite", port=0,
                 poll_interval=0.2, max_backoff=1.0, core=chain.core) as ex,
        httpx2.AsyncClient(timeout=10) as http,
    ):  # fmt: skip
        await until(lambda: ex.indexer.status.caught_up, 30, "the backfill")
        indexed = len(ex.store.all_events())

        await proxy.stop()
        await until(lambda: not ex.indexer.status.rpc_ok, 30, "the indexer to notice")
        answer = (await http.get(ex.url + "/api/runs")).json()
        assert answer["indexer"]["rpc_ok"] is False
        assert "cannot reach the RPC" in answer["indexer"]["error"]
        assert [r["run_id"] for r in answer["runs"]] == ["flaky"], "indexed data must stay served"
        await chain.play("flaky", members)  # the chain moves on while the explorer cannot see it
        await asyncio.sleep(1.5)  # at least one more failed retry
        assert len(ex.store.all_events()) == indexed

        await proxy.start()  # same port
        await until(lambda: ex.indexer.status.rpc_ok, 30, "the indexer to reconnect")
        expected = await chain.expected_events(chain.program_id)
        await until(lambda: len(ex.store.all_events()) == len(expected), 30, "the catch-up")
        assert [(r[0], r[2]) for r in ex.store.all_events()] == expected
        assert (await http.get(ex.url + "/api/status")).json()["indexer"]["error"] is None
    await proxy.stop()


async def test_paused_and_closed_runs_are_shown_as_such(chain, tmp_path):
    from cohort.sdk.explorer import api

    await chain.create_run("short-lived")
    await chain.create_run("stays")
    store = Store(tmp_path / "explorer.sqlite")
    indexer = Indexer(store, chain.rpc, [chain.program_id], core=chain.core)
    await indexer.catch_up()
    await chain.client.set_paused(chain.authority, "short-lived", True)
    await indexer.catch_up()
    runs = {r["run_id"]: r for r in api.runs(store, indexer.status)["runs"]}
    assert runs["short-lived"]["phase"] == "Paused" and runs["short-lived"]["halted"]
    assert runs["stays"]["phase"] == "WaitingForMembers" and not runs["stays"]["halted"]
    await chain.client.close_run(chain.authority, "short-lived")
    await indexer.catch_up()
    runs = {r["run_id"]: r for r in api.runs(store, indexer.status)["runs"]}
    assert runs["short-lived"]["phase"] == "Closed" and runs["short-lived"]["closed"]
    assert not runs["stays"]["closed"]
    detail = api.run(store, indexer.status, "short-lived", chain.net.http_url)
    assert detail["closed"] and "close_run" in detail["transactions"][0]["instructions"]
    store.close()


async def test_a_run_closed_before_the_explorer_started_is_rebuilt_from_its_events(chain, tmp_path):
    from cohort.sdk.explorer import api

    members = await chain.members()
    await chain.create_run("gone-early", name="Gone early")
    await chain.play("gone-early", members)
    address = str((await chain.client.fetch_run("gone-early")).address)
    await chain.client.set_paused(chain.authority, "gone-early", True)
    await chain.client.close_run(chain.authority, "gone-early")
    assert (
        await chain.rpc.account_data(Pubkey.from_string(address)) is None
    )  # nothing left on chain

    store = Store(tmp_path / "explorer.sqlite")  # an explorer started afterwards: only the history
    indexer = Indexer(store, chain.rpc, [chain.program_id], core=chain.core)
    await indexer.catch_up()
    runs = {r["address"]: r for r in api.runs(store, indexer.status)["runs"]}
    gone = runs[address]
    assert gone["run_id"] == "gone-early" and gone["name"] == "Gone early"
    assert gone["closed"] and gone["halted"] and gone["phase"] == "Closed"
    assert gone["epoch"] >= 1 and gone["total_steps"] == 2000 and gone["latest_loss"] is not None
    detail = api.run(store, indexer.status, "gone-early", chain.net.http_url)
    assert detail["closed"] and detail["state"]["rebuilt_from_events"]
    assert "close_run" in detail["transactions"][0]["instructions"]
    assert {c["phase"] for e in detail["timeline"] for c in e["phases"]} >= {"Paused"}
    assert await indexer.catch_up() == 0 and len(api.runs(store, indexer.status)["runs"]) == len(
        runs
    )
    store.close()
