"""The client's one model worker: every operation on the model (train, apply, load, digests, checkpoint
snapshots, evaluation, a verifier's replay of another member's step) runs on one thread, one at a time,
and is never cancelled midway.

Whoever awaits a job may be cancelled; the job itself runs to its end (or, for training, to the next
micro-batch when asked to abort), and the next one starts only after it. So the weights are never read
while they change, weight copies and hashes never block the event loop, and a leaving client cannot leave
half a step in the model.

Two classes of jobs. The member's own (`run`, `run_abortable`: train, apply, load, digests, checkpoints,
evaluation) run in the order they were asked for. Background jobs (`run_background`: the replays of checks
of other members' steps) run, in their own order (disputes' replays, asked `ahead`, before ordinary
checks'), only when no own job waits, so checks stay off the member's critical path. The bound: once an
own job is the oldest one waiting, at most one background job starts before it: the one already running
(a running job is never interrupted), or, right after the own job before it, one the starvation guard lets
through (below). That is one replay's compute at most (one training step's forward and backward on the
trainer's batch, plus the state it stashes and reads back), which the `check_metrics` event reports as
`replay_seconds`; what an own job actually waited for the worker is in the `trained` and `apply_time`
events (`waited`).

Starvation guard: a background job that `patience` own jobs have passed (started after it was asked for)
runs next, right after an own job, even while others wait; at most one such job runs between two own jobs,
so the bound above holds whatever the patience. PATIENCE is 2, one round's own jobs (a train and an
apply). A replay starts from the weights at its step's start, which the replica keeps for KEPT_SNAPSHOTS
steps (trainer.py): one step more than a dispute's replay needs at the latest (its committee's seed is out
DISPUTE_SEED_LAG rounds after the check's, which is out CHECK_SEED_LAG after the step), "for a replay that
waits a round in the worker's queue". Every train that passes a replay spends one step of that slack, so
the guard lets no more than a round of own jobs (one train) pass it; with more, a late dispute's replay
could find its weights gone and lapse. It counts jobs, not seconds, because the slack is in steps: a slow
round and a fast one spend the same.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# own jobs that may pass a waiting background job before it runs next (see the module's doc)
PATIENCE = 2


@dataclass(eq=False)
class _Job:
    call: Callable[..., Any]
    args: tuple
    future: Future = field(default_factory=Future)
    passed_mark: int = 0  # own jobs the worker had started when this (background) job was asked
    # a background job that goes before the other background jobs (a dispute's replay)
    ahead: bool = False


class ModelWorker:
    def __init__(self, patience: int = PATIENCE) -> None:
        self.patience = patience
        self._lock = threading.Condition()
        self._own: deque[_Job] = deque()
        self._background: deque[_Job] = deque()
        self._own_started = 0  # own jobs started, in all: how many passed a background job
        self._last_was_own = False  # the last job started was an own one (the guard follows those)
        self._thread: threading.Thread | None = None
        self._tokens: set[threading.Event] = set()  # abort tokens of jobs not finished yet
        self.closed = False
        self.forced = 0  # background jobs the starvation guard ran ahead of waiting own ones

    # -- asking ---------------------------------------------------------------------------------------
    async def run(self, job: Callable[..., T], *args: object) -> T:
        """Run the own job `job(*args)` after every own job asked before it; cancelling the caller does not
        stop it. RuntimeError once the worker is closed."""
        return await self._await(self._submit(job, args, background=False))

    async def run_abortable(self, job: Callable[..., T], *args: object) -> T:
        """Like `run`, with an abort token as the job's last argument: `abort()` sets it (the job checks
        it between micro-batches and raises)."""
        token = threading.Event()
        self._tokens.add(token)
        try:
            return await self.run(job, *args, token)
        finally:
            self._tokens.discard(token)

    async def run_background(self, job: Callable[..., T], *args: object, ahead: bool = False) -> T:
        """Run the background job `job(*args)` after every background job asked before it, when no own job
        waits (or when the starvation guard says its time has come); with `ahead`, after the background jobs
        asked with `ahead` only (a dispute's replay decides a conviction and has a few steps to run before
        its weights are gone: it does not queue behind ordinary checks). Cancelling the caller drops the job
        if it has not started yet (its inputs may be gone with the caller); a started one runs to its end."""
        future = self._submit(job, args, background=True, ahead=ahead)
        try:
            return await self._await(future)
        except asyncio.CancelledError:
            future.cancel()  # a no-op once the job runs
            raise

    @staticmethod
    async def _await(future: Future) -> Any:
        return await asyncio.shield(asyncio.wrap_future(future))

    def _submit(
        self, call: Callable[..., Any], args: tuple, *, background: bool, ahead: bool = False
    ) -> Future:
        with self._lock:
            if self.closed:
                raise RuntimeError("the model worker is closed")
            job = _Job(call, args, passed_mark=self._own_started, ahead=ahead)
            if not background:
                self._own.append(job)
            elif ahead:  # behind the jobs asked ahead before it, before all others
                queue = self._background
                queue.insert(next((i for i, j in enumerate(queue) if not j.ahead), len(queue)), job)
            else:
                self._background.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="model", daemon=True)
                self._thread.start()
                _live.add(self)
            self._lock.notify()
        return job.future

    # -- the worker's thread --------------------------------------------------------------------------
    def _next(self) -> _Job | None:
        """The job to start now (the lock held): the oldest own job, unless the oldest background job has
        been passed over `patience` times and the last job started was an own one; None if none is left."""
        while self._background and self._background[0].future.cancelled():
            self._background.popleft()  # its caller is gone: it counts for nothing
        if not self._own and not self._background:
            return None
        waiting = self._background[0] if self._background else None
        starved = (
            waiting is not None
            and self._last_was_own
            and self._own_started - waiting.passed_mark >= self.patience
        )
        if self._own and not starved:
            self._own_started += 1
            self._last_was_own = True
            return self._own.popleft()
        if starved and self._own:
            self.forced += 1
        self._last_was_own = False
        return self._background.popleft()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not (self._own or self._background or self.closed):
                    self._lock.wait()
                if self.closed:  # close() took what was queued
                    return
                job = self._next()
            if job is None:
                continue
            if job.future.set_running_or_notify_cancel():
                try:
                    job.future.set_result(job.call(*job.args))
                except BaseException as e:  # the caller's to handle; the worker goes on
                    job.future.set_exception(e)
            del job  # no reference to the job's arguments and result while the worker waits

    # -- stopping -------------------------------------------------------------------------------------
    def abort(self) -> None:
        """Ask every abortable job, running or queued, to stop at its next check."""
        for token in list(self._tokens):
            token.set()

    def close(self) -> None:
        """Stop taking jobs and cancel every queued one, own and background; the running one finishes
        (the thread is not killed)."""
        with self._lock:
            self.closed = True
            queued = [*self._own, *self._background]
            self._own.clear()
            self._background.clear()
            self._lock.notify_all()
        self.abort()
        for job in queued:
            job.future.cancel()

    def join(self, timeout: float | None = None) -> bool:
        """Wait (up to `timeout` seconds) for the worker's thread to end after `close`; whether it did."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True


# workers whose thread was started: at the interpreter's exit each is closed and its running job allowed to
# finish (its thread is a daemon, so a worker nobody closed never keeps the process alive while idle)
_live: weakref.WeakSet[ModelWorker] = weakref.WeakSet()


@atexit.register
def _finish_at_exit() -> None:
    for worker in list(_live):
        worker.close()
        worker.join()
