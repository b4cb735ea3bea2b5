"""What the client receives from and publishes to peers: gossip in (decoded strictly, from members only,
result statements' signatures checked), results and results lists fetched (bounded, checked before they
are kept or served), our own results published. Its decisions are the state machine's; this is the I/O.

Every fetch is bounded: the limit is the exact payload size of this run's model; each attempt has its own
open, progress and rate deadlines, and the whole fetch an overall one; the machine allows one fetch per
trainer at a time, so a member cannot hold many fetch slots. Bytes are checked (they decode for this model
and say the step and batch the chain gave their trainer) before they go into the blob store that serves
peers.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from solders.pubkey import Pubkey

from cohort.sdk.statements import result_statement

from ..p2p import Announcement, BlobFetchError, NodeId, NodeKey, P2PNode, PeerAddress
from .events import Events
from .machine import ListHeld, PeerReady, PeerResult, ResultFailed, ResultHeld, Timing
from .messages import MessageError, Ready, Result, decode_message
from .results_list import ResultsList, ResultsListError
from .rounds import ChainView

FETCH_DEADLINE = 30.0  # seconds one fetch (every attempt, every holder) may take in all
OWN_COPIES = (
    3  # copies of our own result we serve at first: its first fetchers serve the others (CopyLimit)
)
LIST_LIMIT = 8 + 256 * 34 + 8  # the largest results list
HEADERS_KEPT = (
    4096  # the (step, batch) of the payloads checked last (a forgotten one is checked again)
)


def own_patience(max_round_train_time: int) -> float:
    """Seconds our result's copy limit holds (then anyone still missing it may fetch it from us): a quarter
    of the grace seats give a missing result, so a fetcher refused meanwhile still brings it in time."""
    return Timing.witness_grace(max_round_train_time) / 4


class Exchange:
    def __init__(self, node: P2PNode, key: NodeKey, idl: Any, run_address: Pubkey, events: Events,
                 post: Callable[[object], None], check: Callable[[bytes], Any], payload_size: Callable[[], int]) -> None:  # fmt: skip
        self.node, self.key, self.idl, self.run_address = node, key, idl, run_address
        self.events, self.post, self.check, self.payload_size = events, post, check, payload_size
        self.view: ChainView | None = None
        self.members: dict[
            int, PeerAddress
        ] = {}  # epoch index -> address, of this epoch's healthy peers
        self.by_node: dict[bytes, int] = {}  # node id -> epoch index, of every member of the epoch
        self.tasks: set[asyncio.Task] = set()
        self.bytes_received = 0
        # commitment -> the (step, batch) its payload says: a payload names the batch it trained, so bytes we
        # hold are someone's result only if its batch is theirs (a byte-for-byte copy is refused for its copier)
        self.headers: dict[bytes, tuple[int, tuple[int, int]]] = {}
        node.gossip.statement = self.statement_of  # a twin's two statements pass every gossip quota

    # -- membership ---------------------------------------------------------------------------------
    def set_view(self, view: ChainView) -> None:
        self.view = view
        self.by_node = {bytes(c.p2p_identity): c.index for c in view.run.clients}
        # the gossip window follows the chain's rounds (steps); in Warmup, the step the epoch starts at (its
        # Ready messages go out on it: a fresh node's window would otherwise still be at round 0)
        self.node.gossip.advance_round(
            view.newest if view.newest is not None else view.run.progress.step
        )

    def set_peers(
        self, addresses: dict[int, PeerAddress], allowed: tuple[int, ...], overlay_key: bytes | None
    ) -> None:
        """Who may connect and whom we gossip with: the healthy members (drops and exits follow within a
        round, so a dropped member can no longer take our fetch slots or feed us messages)."""
        self.members = {i: a for i, a in addresses.items() if i in allowed}
        self.node.set_clients(self.members.values(), overlay_key=overlay_key)

    def reset(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.tasks.clear()
        self.members.clear()

    # -- gossip in ----------------------------------------------------------------------------------
    def on_message(self, announcement: Announcement) -> None:
        sender = self.by_node.get(announcement.origin.key)
        if sender is None or (self.members and sender not in self.members):
            return  # not a healthy member of this epoch (the allowlist keeps strangers out already)
        try:
            message = decode_message(announcement.payload)
        except MessageError as e:
            self.events.emit("bad_message", sender=sender, error=str(e))
            return
        if isinstance(message, Ready):
            self.post(PeerReady(sender, message.epoch))
            return
        if message.step != announcement.round:  # the gossip layer bounds rounds, so it bounds steps
            self.events.emit(
                "bad_message", sender=sender, error="step differs from its gossip round"
            )
            return
        statement = self._statement(message.step, message.batch, message.commitment)
        if not announcement.origin.verify(statement, message.signature):
            self.events.emit(
                "bad_message", sender=sender, error="result statement not signed by its trainer"
            )
            return
        self.post(PeerResult(sender, message))

    def statement_of(self, announcement: Announcement) -> bytes | None:
        """What a result announcement states (its commitment), once its statement's signature by its origin
        is checked; None for anything else. Two different ones of a step prove equivocation, so the gossip
        layer takes an origin's first two whatever fillers it spent its quota on."""
        try:
            message = decode_message(announcement.payload)
        except MessageError:
            return None
        if not isinstance(message, Result) or message.step != announcement.round:
            return None
        statement = self._statement(message.step, message.batch, message.commitment)
        return (
            message.commitment if announcement.origin.verify(statement, message.signature) else None
        )

    def _statement(self, step: int, batch: tuple[int, int], commitment: bytes) -> bytes:
        """A result statement of the epoch we are in (its steps are this epoch's: an older epoch's statement
        does not verify, as on chain)."""
        epoch = self.view.run.epoch_number if self.view is not None else 0
        return result_statement(self.idl, self.run_address, epoch, step, batch, commitment)

    # -- publishing ---------------------------------------------------------------------------------
    async def publish(
        self, step: int, batch: tuple[int, int], commitment: bytes, payload: bytes
    ) -> None:
        patience = (
            own_patience(self.view.run.config.max_round_train_time)
            if self.view is not None
            else 0.0
        )
        self.node.store.put_verified(
            commitment, payload, step, own_copies=OWN_COPIES, patience=patience
        )
        self._remember(commitment, step, batch)
        signature = self.key.sign(self._statement(step, batch, commitment))
        await self.node.announce(
            step, Result(step, *batch, commitment, len(payload), signature).encode()
        )

    def keep_list(self, results: ResultsList) -> None:
        """Serve our results list under its root (peers whose list differs fetch the decided one)."""
        self.node.store.put_verified(results.root, results.encode(), results.step)

    # -- fetching -----------------------------------------------------------------------------------
    def _providers(self, trainer: int | None, trainer_last: bool = False) -> list[PeerAddress]:
        """Holders to ask: the other members in random order (holders re-serve what they checked, so a
        result spreads instead of every client fetching it from its trainer), with its trainer first while
        only it may hold it, last once the seats that decided it do."""
        others = [a for i, a in self.members.items() if i != trainer]
        random.shuffle(others)
        own = [self.members[trainer]] if trainer is not None and trainer in self.members else []
        return others + own if trainer_last else own + others

    def fetch(self, step: int, sender: int, commitment: bytes, batch: tuple[int, int] | None,
              decided: bool = False) -> None:  # fmt: skip
        self._spawn(self._fetch(step, sender, commitment, batch, decided))

    async def _fetch(self, step: int, sender: int, commitment: bytes, batch: tuple[int, int] | None,
                     decided: bool) -> None:  # fmt: skip
        held = self.node.store.get(commitment)
        if (
            held is not None
        ):  # checked when it was kept; but is it the result of this trainer's batch?
            header = self.headers.get(commitment)
            if header is None:
                try:
                    checked = self.check(held)
                except (
                    ValueError
                ) as e:  # cannot be (checked before it was kept): refused all the same
                    self.post(ResultFailed(step, sender, commitment, True, str(e)))
                    return
                header = self._remember(commitment, checked.step, checked.batch)
            if header[0] != step or (batch is not None and header[1] != batch):
                self.post(ResultFailed(step, sender, commitment, True, "the same payload as a result for another "
                                                                       "step or batch (a copy)"))  # fmt: skip
                return
            self.post(ResultHeld(step, sender, commitment))
            return
        size = self.payload_size()
        started = time.perf_counter()
        try:
            async with asyncio.timeout(FETCH_DEADLINE):
                fetched = await self.node.fetcher.fetch_detailed(
                    commitment, self._providers(sender, decided), max_size=size, expected_size=size
                )
            data = fetched.data
        except (BlobFetchError, OSError, TimeoutError) as e:
            self.post(ResultFailed(step, sender, commitment, False, str(e) or "fetch timed out"))
            return
        try:
            if len(data) != size:
                raise ValueError(f"payload of {len(data)} bytes; this model's are {size}")
            header = self.check(data)
            if header.step != step or (batch is not None and header.batch != batch):
                raise ValueError("payload header disagrees with its announcement")
        except ValueError as e:
            self.post(ResultFailed(step, sender, commitment, True, str(e)))
            return
        self.bytes_received += len(data)
        self.node.store.put_verified(commitment, data, step)  # checked: now we serve it too
        self._remember(commitment, header.step, header.batch)
        self.events.emit("fetched", step=step, sender=sender, seconds=round(time.perf_counter() - started, 3),
                         from_trainer=self.by_node.get(fetched.provider.key) == sender, failed=len(fetched.failed))  # fmt: skip
        self.post(ResultHeld(step, sender, commitment))

    def _remember(
        self, commitment: bytes, step: int, batch: tuple[int, int]
    ) -> tuple[int, tuple[int, int]]:
        self.headers.pop(commitment, None)
        self.headers[commitment] = (step, batch)
        while len(self.headers) > HEADERS_KEPT:
            del self.headers[next(iter(self.headers))]
        return step, batch

    def fetch_list(self, step: int, root: bytes, holders: tuple[int, ...], clients: int) -> None:
        self._spawn(self._fetch_list(step, root, holders, clients))

    async def _fetch_list(
        self, step: int, root: bytes, holders: tuple[int, ...], clients: int
    ) -> None:
        data = self.node.store.get(root)
        if data is None:
            first = [self.members[i] for i in holders if i in self.members]
            rest = [a for a in self._providers(None) if a not in first]
            try:
                async with asyncio.timeout(FETCH_DEADLINE):
                    data = await self.node.fetcher.fetch(root, first + rest, max_size=LIST_LIMIT)
            except (BlobFetchError, OSError, TimeoutError) as e:
                self.events.emit("fetch_retry", step=step, list=root.hex()[:16], error=str(e)[:200])
                self.post(ListHeld(step, root, None))
                return
        try:
            results = ResultsList.decode(data, step=step, clients=clients)
        except ResultsListError as e:
            self.events.emit("bad_result", step=step, list=root.hex()[:16], error=str(e)[:200])
            self.post(ListHeld(step, root, None))
            return
        self.node.store.put_verified(root, data, step)
        self.post(ListHeld(step, root, results))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    @staticmethod
    def node_of(identity: Pubkey) -> NodeId:
        return NodeId(bytes(identity))
