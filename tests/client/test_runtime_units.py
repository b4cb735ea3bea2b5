"""The client's pure parts: gossip bodies, results lists and node addresses decoded strictly, the signed
result statement, the model worker (own jobs in order, checks' replays between them), and a joiner's
checkpoint fetch retried within its warmup."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import os
import signal
import threading
import time
import weakref
from types import SimpleNamespace

import pytest
from solders.keypair import Keypair

from cohort.client.checkpoint import CheckpointError
from cohort.client.p2p import NodeKey, PeerAddress
from cohort.client.runtime import effects
from cohort.client.runtime.collector import collect_on_the_loop, due_generation
from cohort.client.runtime.connect import install_signals
from cohort.client.runtime.messages import MessageError, Ready, Result, decode_message
from cohort.client.runtime.peers import ENDPOINT_CAPACITY, decode_endpoint, encode_endpoint
from cohort.client.runtime.results_list import ResultsList, ResultsListError
from cohort.client.runtime.worker import ModelWorker
from cohort.sdk.coordinator_core import load_idl
from cohort.sdk.statements import result_statement

SIG = b"s" * 64


def test_messages_round_trip_and_anything_else_is_refused():
    for message in (Ready(3), Result(17, 8, 16, b"c" * 32, 31_184, SIG)):
        assert decode_message(message.encode()) == message
    good = Result(1, 0, 8, b"c" * 32, 100, SIG).encode()
    for body, why in [
        (b"", "empty"), (b"\x09" + good[1:], "unknown message kind 9"), (good[:-1], "is 125 bytes, got 124"),
        (good + b"\0", "got 126"), (Result(1, 8, 8, b"c" * 32, 100, SIG).encode(), "is empty"),
        (Result(1, 0, 8, b"c" * 32, 0, SIG).encode(), "size 0"),
        (Result(1, 0, 8, b"c" * 32, 2**31, SIG).encode(), "out of range"),
        (b"\x03" + bytes(8), "unknown message kind 3"),  # the old Finished: no longer part of the protocol
    ]:  # fmt: skip
        with pytest.raises(MessageError, match=why):
            decode_message(body)


def test_a_result_statement_is_what_the_node_key_signs_and_names_run_epoch_step_batch_commitment():
    idl, run = load_idl(), Keypair().pubkey()
    key = NodeKey.generate()
    statement = result_statement(idl, run, 2, 7, (16, 24), b"c" * 32)
    signature = key.sign(statement)
    assert key.node_id.verify(statement, signature)
    for other in (result_statement(idl, run, 2, 8, (16, 24), b"c" * 32), result_statement(idl, run, 2, 7, (16, 25), b"c" * 32),
                  result_statement(idl, Keypair().pubkey(), 2, 7, (16, 24), b"c" * 32),
                  result_statement(idl, run, 2, 7, (16, 24), b"d" * 32),
                  result_statement(idl, run, 3, 7, (16, 24), b"c" * 32)):  # fmt: skip
        assert not key.node_id.verify(other, signature)


def test_results_lists_encode_to_their_root_and_decode_strictly():
    held = {4: b"b" * 32, 1: b"a" * 32}
    results = ResultsList.of(9, held)
    assert results.entries == ((1, b"a" * 32), (4, b"b" * 32))  # sorted: one encoding, one root
    assert ResultsList.decode(results.encode(), step=9, clients=5) == results
    assert results.root == ResultsList.of(9, dict(reversed(list(held.items())))).root
    assert results.participants()[0] == 0b10010
    data = results.encode()
    for bad, why in [
        (data[:-1], "does not hold"), (b"XXXX" + data[4:], "bad magic"), (data + b"\0", "does not hold"),
        (ResultsList(9, ((4, b"b" * 32), (1, b"a" * 32))).encode(), "ascending"),
        (ResultsList(9, ((1, b"a" * 32), (1, b"a" * 32))).encode(), "ascending"),
    ]:  # fmt: skip
        with pytest.raises(ResultsListError, match=why):
            ResultsList.decode(bad, step=9, clients=5)
    with pytest.raises(ResultsListError, match="expected 10"):
        ResultsList.decode(data, step=10, clients=5)
    with pytest.raises(ResultsListError, match="indices"):
        ResultsList.decode(data, step=9, clients=4)  # index 4 is not a client of a 4-client epoch


def test_endpoints_round_trip_and_keep_the_relay_when_cut():
    node = NodeKey.generate().node_id
    address = PeerAddress(node, ("127.0.0.1:4000", "[::1]:4001"), "https://relay.example")
    text = encode_endpoint(address)
    assert text == "127.0.0.1:4000 [::1]:4001 relay=https://relay.example"
    assert decode_endpoint(node, text) == address
    many = PeerAddress(node, tuple(f"10.0.0.{i}:40000" for i in range(20)), "https://relay.example")
    cut = encode_endpoint(many)
    assert len(cut) <= ENDPOINT_CAPACITY and cut.endswith("relay=https://relay.example")
    assert decode_endpoint(node, cut).addrs == many.addrs[: len(decode_endpoint(node, cut).addrs)]
    for bad in ["127.0.0.1", "host:port", "1.2.3.4:99999", "relay=ftp://x", "relay=https://a relay=https://b",
                "a\x01:1", "x" * (ENDPOINT_CAPACITY + 1)]:  # fmt: skip
        with pytest.raises(ValueError):
            decode_endpoint(node, bad)


async def test_the_model_worker_runs_jobs_in_order_to_their_end_even_when_the_caller_is_cancelled():
    worker = ModelWorker()
    log: list[str] = []

    def slow(name: str) -> str:
        time.sleep(0.2)
        log.append(name)
        return name

    first = asyncio.ensure_future(worker.run(slow, "first"))
    second = asyncio.ensure_future(worker.run(slow, "second"))
    await asyncio.sleep(0.05)
    first.cancel()  # whoever waited is gone; the job still finishes, and before the next one
    assert await second == "second"
    assert log == ["first", "second"]

    def abortable(steps: int, abort: threading.Event) -> int:
        for done in range(steps):
            if abort.is_set():
                return done
            time.sleep(0.02)
        return steps

    job = asyncio.ensure_future(worker.run_abortable(abortable, 100))
    await asyncio.sleep(0.1)
    worker.abort()
    assert 0 < await job < 100  # stopped at a check between "micro-batches"
    worker.close()


class Gate:
    """A job that holds the worker until `open()`: what the jobs queued behind it are ordered against."""

    def __init__(self, log: list[str]) -> None:
        self.log, self.entered, self.released = log, threading.Event(), threading.Event()

    def __call__(self, name: str) -> str:
        self.entered.set()
        self.released.wait(5)
        self.log.append(name)
        return name

    async def hold(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 5)

    def open(self) -> None:
        self.released.set()


async def queued(*jobs) -> list[asyncio.Future]:
    """Each coroutine as a task, asked of the worker in the order given (a task asks on its first run)."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    await asyncio.sleep(0)
    return tasks


async def results(tasks: list[asyncio.Future]) -> list:
    async with asyncio.timeout(5):
        return await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_worker_takes_own_jobs_before_background_ones_and_never_interrupts_one():
    worker, log = ModelWorker(patience=10), []
    note = log.append
    gate = Gate(log)
    first = asyncio.ensure_future(worker.run(gate, "gate"))
    await gate.hold()
    tasks = await queued(worker.run_background(note, "b1"), worker.run_background(note, "b2"),
                         worker.run(note, "o1"), worker.run(note, "o2"))  # fmt: skip
    gate.open()
    await results([first, *tasks])
    assert log == ["gate", "o1", "o2", "b1", "b2"]  # background jobs in their own order, after ours

    # an own job asked while a background job runs waits for that one only, not for the others queued
    log.clear()
    gate = Gate(log)
    running = asyncio.ensure_future(worker.run_background(gate, "b0"))
    await gate.hold()
    tasks = await queued(worker.run_background(note, "b1"), worker.run(note, "o1"),
                         worker.run_background(note, "b2"), worker.run(note, "o2"))  # fmt: skip
    gate.open()
    await results([running, *tasks])
    assert log == ["b0", "o1", "o2", "b1", "b2"] and worker.forced == 0

    # background jobs asked `ahead` (disputes' replays) go before the others, in their own order
    log.clear()
    gate = Gate(log)
    running = asyncio.ensure_future(worker.run_background(gate, "b0"))
    await gate.hold()
    tasks = await queued(worker.run_background(note, "b1"), worker.run_background(note, "d1", ahead=True),
                         worker.run(note, "o1"), worker.run_background(note, "d2", ahead=True))  # fmt: skip
    gate.open()
    await results([running, *tasks])
    assert log == ["b0", "o1", "d1", "d2", "b1"]
    worker.close()


async def test_a_background_job_passed_over_by_patience_own_jobs_runs_next_one_at_a_time():
    worker, log = ModelWorker(patience=2), []
    note = log.append
    gate = Gate(log)
    first = asyncio.ensure_future(worker.run(gate, "gate"))
    await gate.hold()
    tasks = await queued(worker.run_background(note, "b1"), worker.run_background(note, "b2"),
                         *(worker.run(note, f"o{i}") for i in range(1, 6)))  # fmt: skip
    gate.open()
    await results([first, *tasks])
    # b1 runs once o1 and o2 passed it; b2 (passed as often) only after the next own job: between two own
    # jobs at most one background job, so an own job waits for one at most
    assert log == ["gate", "o1", "o2", "b1", "o3", "b2", "o4", "o5"]
    assert worker.forced == 2
    worker.close()


async def test_close_cancels_queued_jobs_of_both_classes_and_abort_reaches_own_abortable_ones():
    worker, log = ModelWorker(), []
    gate = Gate(log)
    running = asyncio.ensure_future(worker.run(gate, "gate"))
    await gate.hold()

    def abortable(name: str, abort: threading.Event) -> str:
        return f"{name} aborted" if abort.is_set() else name

    tasks = await queued(worker.run_abortable(abortable, "own"), worker.run_background(log.append, "b"),
                         worker.run(log.append, "o"))  # fmt: skip
    worker.abort()  # the queued abortable job will see its token; a background job has none
    worker.close()
    gate.open()
    out = await results([running, *tasks])
    assert out[0] == "gate"  # the running job finished
    assert all(isinstance(o, asyncio.CancelledError) for o in out[1:])  # the queued ones never ran
    assert log == ["gate"] and worker.join(5)
    with pytest.raises(RuntimeError, match="closed"):
        await worker.run_background(log.append, "late")
    with pytest.raises(RuntimeError, match="closed"):
        await worker.run(log.append, "late")

    worker = (
        ModelWorker()
    )  # abort, without a close: the abortable job stops, the background one runs
    gate = Gate(log := [])
    running = asyncio.ensure_future(worker.run(gate, "gate"))
    await gate.hold()
    tasks = await queued(
        worker.run_abortable(abortable, "own"),
        worker.run_background(abortable, "b", threading.Event()),
    )
    worker.abort()
    gate.open()
    assert await results([running, *tasks]) == ["gate", "own aborted", "b"]
    worker.close()


async def test_a_job_that_raises_fails_its_caller_only_and_a_dropped_background_job_never_runs():
    worker, log = ModelWorker(), []

    def fail(kind: str) -> None:
        raise ValueError(kind)

    for run in (worker.run, worker.run_background):
        with pytest.raises(ValueError, match="boom"):
            async with asyncio.timeout(5):
                await run(fail, "boom")
    async with asyncio.timeout(5):
        assert await worker.run(lambda: "still here") == "still here"

    # a background job whose caller is gone before it started is dropped (its inputs may be gone too);
    # an own job whose caller is gone still runs (the worker's promise)
    gate = Gate(log)
    running = asyncio.ensure_future(worker.run(gate, "gate"))
    await gate.hold()
    background, own = await queued(
        worker.run_background(log.append, "b"), worker.run(log.append, "o")
    )
    background.cancel()
    own.cancel()
    await asyncio.sleep(0)
    gate.open()
    async with asyncio.timeout(5):
        await running
        assert await worker.run(lambda: "after") == "after"
    assert log == ["gate", "o"]
    worker.close()


async def test_timed_jobs_report_how_long_they_waited_behind_a_replay():
    worker = ModelWorker()
    replay_started = threading.Event()

    def replay() -> None:
        replay_started.set()
        time.sleep(0.15)

    background = asyncio.ensure_future(worker.run_background(effects.Timed(replay)))
    assert await asyncio.to_thread(replay_started.wait, 5)
    train = effects.Timed(lambda: "trained")
    async with asyncio.timeout(5):
        assert await worker.run(train) == "trained"
        await background
    assert (
        0.05 < train.waited < 1.0 and train.seconds < 0.1
    )  # the rest of the one replay running, no more
    worker.close()


class Recorder:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict]] = []

    def emit(self, event: str, **fields: object) -> None:
        self.emitted.append((event, fields))

    def status(self, **fields: object) -> None:
        pass


def joiner(fetch, repo: str = "", revision: str = "") -> tuple[effects.Effects, Recorder, list]:
    """Effects of a client whose run points at the checkpoint of its current step (kept besides peers in
    `repo` at `revision`, if given), fetched by `fetch`."""
    loaded: list = []
    trainer = SimpleNamespace(load=lambda path, manifest: loaded.append(path), digest=lambda: "d")
    ready = asyncio.get_running_loop().create_future()
    ready.set_result(trainer)

    async def run(fn, *args):
        return fn(*args)

    run_state = SimpleNamespace(config=SimpleNamespace(warmup_time=10), progress=SimpleNamespace(step=5),
                                model=SimpleNamespace(checkpoint=SimpleNamespace(step=5, weights_sha256=bytes([1]) * 32, kind="P2P",
                                                                                 repo=repo, revision=revision)))  # fmt: skip
    events = Recorder()
    client = SimpleNamespace(trainer_ready=ready, latest=run_state, events=events,
                             shelf=SimpleNamespace(fetch=fetch), worker=SimpleNamespace(run=run))  # fmt: skip
    return effects.Effects(client), events, loaded


async def test_a_joiner_refused_at_an_epochs_start_asks_again_within_half_its_warmup(monkeypatch):
    clock = iter(
        range(10**6)
    )  # every reading one second later: the bound is counted, not waited for
    monkeypatch.setattr(
        effects,
        "time",
        SimpleNamespace(monotonic=lambda: next(clock), perf_counter=time.perf_counter),
    )
    monkeypatch.setattr(effects, "CHECKPOINT_RETRY", 0.0)
    answers = [CheckpointError("no peer let us in"), OSError("reset"), "/checkpoints/step-5"]

    async def fetch(manifest, providers, hub=None):
        assert hub is None  # the record names no Hub copy
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    fx, events, loaded = joiner(fetch)
    assert await fx._load_checkpoint(epoch=2) == (True, "")
    assert loaded == ["/checkpoints/step-5"]
    assert [e for e, _ in events.emitted] == [
        "checkpoint_retry",
        "checkpoint_retry",
        "checkpoint_loaded",
    ]

    async def refused(manifest, providers, hub=None):
        raise CheckpointError("not on the allowlist")

    fx, events, loaded = joiner(refused)
    ok, reason = await fx._load_checkpoint(epoch=2)
    assert (ok, reason, loaded) == (False, "not on the allowlist", [])
    assert [e for e, _ in events.emitted] == [
        "checkpoint_retry"
    ] * 5  # half of the 10 s warmup, then it leaves


async def test_a_joiner_tries_the_hub_copy_once_the_peers_had_their_time(monkeypatch):
    """The record names a Hub revision (a checkpointer's --hub-repo): asked with the peers' last try, or at
    once when no peer is left."""
    clock = iter(range(10**6))
    monkeypatch.setattr(
        effects,
        "time",
        SimpleNamespace(monotonic=lambda: next(clock), perf_counter=time.perf_counter),
    )
    monkeypatch.setattr(effects, "CHECKPOINT_RETRY", 0.0)
    asked = []

    async def fetch(manifest, providers, hub=None):
        asked.append(hub)
        if hub is None:
            raise CheckpointError("no peer delivered")
        return "/checkpoints/from-hub"

    fx, events, loaded = joiner(fetch, repo="me/ckpt", revision="abc123")
    fx.addresses = {1: "a peer"}
    assert await fx._load_checkpoint(epoch=2) == (True, "")
    assert loaded == ["/checkpoints/from-hub"] and asked[-1] == ("me/ckpt", "abc123")
    assert asked[:-1] and set(asked[:-1]) == {None}  # the peers first, for half the warmup
    assert [e for e, _ in events.emitted][-1] == "checkpoint_loaded"

    asked.clear()
    fx, _, loaded = joiner(fetch, repo="me/ckpt", revision="abc123")  # no peer of this epoch at all
    assert await fx._load_checkpoint(epoch=2) == (True, "") and asked == [("me/ckpt", "abc123")]


class _Parts:
    """A node's fetch that holds some parts and fails the rest (the P2P boundary a check's fetch stands on)."""

    def __init__(self, held: dict[bytes, bytes]) -> None:
        self.held, self.asked, self.sizes, self.rates = held, [], [], []

    async def fetch(
        self,
        blob: bytes,
        providers,
        max_size: int,
        expected_size=None,
        background=False,
        min_rate=None,
    ) -> bytes:
        assert background  # a check's parts never take the slots a round's results need
        self.rates.append(min_rate)
        self.asked.append(blob)
        self.sizes.append(expected_size)
        if blob not in self.held:
            from cohort.client.p2p import BlobFetchError

            raise BlobFetchError(blob, [])
        return self.held[blob]


async def test_a_checks_parts_are_fetched_with_retries_and_a_missing_one_fails_plainly(
    tmp_path, monkeypatch
):
    from types import SimpleNamespace

    monkeypatch.setattr("cohort.client.runtime.effects.PART_RETRY_PAUSE", 0.0)

    from cohort.client.p2p import BlobFetchError
    from cohort.client.runtime.effects import PART_TRIES, Effects
    from cohort.client.runtime.machine import Check
    from cohort.client.verify.sample import PartsOnDisk
    from cohort.sdk.models import RunConfig

    held = {bytes([i]) * 32: bytes([i]) * 100 for i in range(5)}
    fetcher = _Parts(held)
    events = []
    run = SimpleNamespace(config=SimpleNamespace(check_rate_kib=64))  # the run's declared rate
    effects = Effects(SimpleNamespace(node=SimpleNamespace(fetch_blob=fetcher.fetch), latest=run,
                                      events=SimpleNamespace(emit=lambda kind, **f: events.append((kind, f)))))  # fmt: skip
    parts = PartsOnDisk.unique(tmp_path, "check-3-1")
    other = PartsOnDisk.unique(
        tmp_path, "check-3-1"
    )  # the same step's dispute, at once: a file of its own
    other.add(next(iter(held)), b"x")
    assert other.path != parts.path
    other.close()
    sizes = {h: len(d) for h, d in held.items()}  # from the manifests
    big = next(iter(held))
    sizes[big] = 256 << 10  # (the stub does not hold it to that size)
    await effects._fetch_parts(list(held), sizes, [], parts)
    assert dict(parts) == held and sorted(fetcher.asked) == sorted(held)
    assert set(fetcher.rates) == {64 << 10} and RunConfig.check_rate_kib == 256
    # a large part comes striped (its size given), small ones whole
    assert sorted(fetcher.sizes, key=str) == [256 << 10] + [None] * 4
    parts.close()

    missing = b"\xff" * 32
    parts = PartsOnDisk(tmp_path / "b.parts")
    with pytest.raises(
        BlobFetchError
    ):  # the caller reports StateNotDelivered: a plain error, not a group
        await effects._fetch_parts(
            [*held, missing], sizes, [], parts, check=Check(0, 3, 1, b"", b"", 0)
        )
    assert fetcher.asked.count(missing) == PART_TRIES
    retries = [f for kind, f in events if kind == "check_retry"]
    assert [(f["step"], f["trainer"], f["attempt"]) for f in retries] == [(3, 1, 1), (3, 1, 2)]
    parts.close()
    assert not (tmp_path / "b.parts").exists()


def test_our_results_copy_limit_lasts_a_quarter_of_the_seats_grace():
    """The trainer's first copies are held back for a time that follows the run's round time (it was a
    fixed 10 s: longer than a seat waits at a round time of 8 s or 10 s)."""
    from cohort.client.runtime.exchange import own_patience
    from cohort.client.runtime.machine import Timing

    for round_time in (5, 8, 10, 30, 300):
        assert own_patience(round_time) == Timing.witness_grace(round_time) / 4
    assert own_patience(8) < 1.0 and own_patience(300) == 25.0


async def test_sigusr1_writes_every_threads_stack_to_stderr(capfd):
    """Written from the signal itself, so a client whose event loop is stuck in a blocking call still
    answers it."""
    install_signals(lambda: None)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert "Current thread" in capfd.readouterr().err
    finally:
        faulthandler.unregister(signal.SIGUSR1)


def test_the_loop_collects_what_the_automatic_collector_would():
    thresholds = (700, 10, 10)
    assert due_generation((701, 0, 0), thresholds) == 0
    assert due_generation((5, 11, 0), thresholds) == 1
    assert due_generation((701, 11, 11), thresholds) == 2
    assert due_generation((700, 10, 10), thresholds) is None
    assert (
        due_generation((10**6, 0, 0), (0, 10, 10)) is None
    )  # a threshold of 0 turns a generation off


async def test_cycles_are_collected_on_the_loop_with_automatic_collection_off():
    class Node:
        pass

    collector = asyncio.ensure_future(collect_on_the_loop(every=0.01))
    try:
        await asyncio.sleep(0.05)
        assert not gc.isenabled()
        freed: list[int] = []
        node = Node()
        node.itself = node  # a cycle: only the collector frees it
        weakref.finalize(node, freed.append, 1)
        del node
        # allocations past the young generation's threshold (kept: a freed one takes its count back)
        junk = [[] for _ in range(2 * gc.get_threshold()[0])]
        for _ in range(100):
            if freed:
                break
            await asyncio.sleep(0.01)
        assert freed == [1] and junk
    finally:
        collector.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collector
    assert gc.isenabled()
