"""What peers tell us during an epoch, per step: who is Ready, whose results we hold (fetched, checked), who
said Finished. Every message is checked against the chain before it counts: the sender must be a member,
a result must be for the batch the chain gave its sender, the payload must decode for this model and match
its announcement, and only a trainer's first announcement per step counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.models import Run

from ..p2p import Announcement, BlobFetchError, NodeId, P2PNode
from .events import Events
from .messages import Finished, MessageError, Ready, Result, decode_message
from .rounds import StepBook, assignments, round_step, round_view

KEEP_STEPS = 4  # books of steps older than the current one minus this are forgotten
FETCH_DEADLINE = 60.0  # seconds a result is tried for, from every holder in turn


class Exchange:
    def __init__(
        self,
        node: P2PNode,
        core: CoordinatorCore,
        events: Events,
        latest: Callable[[], Run | None],
        check: Callable[[bytes], Any],  # the decoded result of a payload, or ValueError
        spawn: Callable[[Awaitable[Any]], asyncio.Task],
        changed: asyncio.Event,
    ) -> None:
        self.node, self.core, self.events = node, core, events
        self.latest, self.check, self.spawn, self.changed = latest, check, spawn, changed
        self.books: dict[int, StepBook] = {}
        self.ready: set[int] = set()
        self.fetches: dict[tuple[int, int], asyncio.Task] = {}
        self.bytes_received = 0
        self.stopped = False

    def reset(self) -> None:
        """A new epoch: forget everything of the last one."""
        for task in self.fetches.values():
            task.cancel()
        self.fetches.clear()
        self.books.clear()
        self.ready.clear()

    def close(self) -> None:
        self.stopped = True
        self.reset()

    def book(self, step: int) -> StepBook:
        book = self.books.get(step)
        if book is None:
            book = self.books[step] = StepBook(step)
            run = self.latest()
            floor = (run.progress.step if run else step) - KEEP_STEPS
            for old in [s for s in self.books if s < floor]:
                del self.books[old]
        return book

    def held(self, step: int) -> StepBook | None:
        return self.books.get(step)

    def keep_own(self, step: int, index: int, batch: tuple[int, int], commitment: bytes, payload: bytes) -> StepBook:
        book = self.book(step)
        book.results[index] = (commitment, payload)
        book.announced[index] = commitment
        book.batches[index] = batch
        return book

    # -- gossip in ------------------------------------------------------------------------------------
    def on_message(self, announcement: Announcement) -> None:
        run = self.latest()
        if run is None or self.stopped:
            return
        sender = next((c for c in run.clients if bytes(c.p2p_identity) == announcement.origin.key), None)
        if sender is None:
            return  # not a member of this epoch (the allowlist keeps strangers out already)
        try:
            message = decode_message(announcement.payload)
        except MessageError as e:
            self.events.emit("bad_message", sender=sender.index, error=str(e))
            return
        if isinstance(message, Ready):
            if message.epoch == run.progress.epoch:
                self.ready.add(sender.index)
        elif message.step != announcement.round:  # the gossip layer bounds rounds, so it bounds steps
            self.events.emit("bad_message", sender=sender.index, error="step differs from its gossip round")
            return
        elif isinstance(message, Finished):
            self.book(message.step).finished.add(sender.index)
        elif isinstance(message, Result):
            if not self._assigned(run, sender.index, message):
                self.events.emit("bad_message", sender=sender.index, error="result for a batch it was not given")
                return
            book = self.book(message.step)
            if sender.index in book.announced:
                return  # one result per trainer and step: the first announcement counts
            book.announced[sender.index] = message.commitment
            key = (message.step, sender.index)
            self.fetches[key] = self.spawn(self._fetch(message, sender.index, announcement.origin))
        self.changed.set()

    def _assigned(self, run: Run, index: int, message: Result) -> bool:
        """Whether `index` trains exactly that batch at that step (unknown yet for a step ahead of us)."""
        back = round_step(run) - message.step
        view = round_view(self.core, run, back) if back >= 0 else None
        if view is None or view.step != message.step:
            return message.step >= run.progress.step  # a round we have not seen yet: checked when applied
        return assignments(self.core, view).get(index) == (message.batch_start, message.batch_end)

    async def _fetch(self, message: Result, index: int, origin: NodeId) -> None:
        """Download and check a peer's result; other holders are tried when the announcer fails."""
        until = time.monotonic() + FETCH_DEADLINE
        while time.monotonic() < until and not self.stopped:
            try:
                data = await self.node.fetch_blob(message.commitment, self.node.providers_for(origin),
                                                  round=message.step, max_size=message.size)  # fmt: skip
            except (BlobFetchError, OSError) as e:
                self.events.emit("fetch_retry", step=message.step, sender=index, error=str(e)[:200])
                await asyncio.sleep(0.5)
                continue
            try:
                received = self.check(data)
                if (received.step, received.batch.start, received.batch.end) != (
                    message.step, message.batch_start, message.batch_end):  # fmt: skip
                    raise ValueError("payload header disagrees with its announcement")
            except ValueError as e:
                self.events.emit("bad_result", step=message.step, sender=index, error=str(e)[:200])
                return
            self.bytes_received += len(data)
            book = self.book(message.step)
            book.results[index] = (message.commitment, data)
            book.batches[index] = (message.batch_start, message.batch_end)
            self.changed.set()
            return
        self.events.emit("fetch_gave_up", step=message.step, sender=index)
