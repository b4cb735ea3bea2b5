"""The client's one model worker: every operation on the model (train, apply, load, digests, checkpoint
snapshots, evaluation) runs on one thread, in the order it was asked for, and is never cancelled midway.

Whoever awaits a job may be cancelled; the job itself runs to its end (or, for training, to the next
micro-batch when asked to abort), and the next one starts only after it. So the weights are never read
while they change, weight copies and hashes never block the event loop, and a leaving client cannot leave
half a step in the model.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class ModelWorker:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._tokens: set[threading.Event] = set()  # abort tokens of jobs not finished yet
        self.closed = False

    async def run(self, job: Callable[..., T], *args: object) -> T:
        """Run `job(*args)` after every job asked before it; cancelling the caller does not stop it."""
        return await asyncio.shield(asyncio.wrap_future(self._pool.submit(job, *args)))

    async def run_abortable(self, job: Callable[..., T], *args: object) -> T:
        """Like `run`, with an abort token as the job's last argument: `abort()` sets it (the job checks
        it between micro-batches and raises)."""
        token = threading.Event()
        self._tokens.add(token)
        try:
            return await self.run(job, *args, token)
        finally:
            self._tokens.discard(token)

    def abort(self) -> None:
        """Ask every abortable job, running or queued, to stop at its next check."""
        for token in list(self._tokens):
            token.set()

    def close(self) -> None:
        """Stop taking jobs; the running one finishes (the thread is not killed)."""
        self.closed = True
        self.abort()
        self._pool.shutdown(wait=False, cancel_futures=True)
