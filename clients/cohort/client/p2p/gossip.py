"""Gossip: signed announcements flooded over the overlay, with digest repair.

On first receipt a node checks the announcement (known origin, valid signature, live round), hands
it to the application once, and pushes it to its overlay neighbours except the one it came from.
Every `repair_interval` seconds (and on `repair_now`, e.g. at round close) each node sends its
neighbours a digest of the ids it holds; they answer with what it is missing. So a message lost to a
dead link, a full queue or a late membership update still arrives.

Protocols (over any transport):
    push    request = one announcement; empty reply
    digest  request = u64 oldest round | 8-byte id prefixes held; reply = (u16 length | announcement)*
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from . import overlay
from .announcement import MAX_ANNOUNCEMENT, TOPIC_BYTES, Announcement
from .identity import NodeId
from .transport import (
    PeerAddress,
    Reply,
    ReplyWriter,
    RequestRejected,
    Status,
    Transport,
    TransportError,
)

log = logging.getLogger(__name__)

PUSH_PROTOCOL = "cohort/gossip/push/1"
DIGEST_PROTOCOL = "cohort/gossip/digest/1"
SHORT_ID = 8
MAX_DIGEST_IDS = 16384
_ROUND = struct.Struct(">Q")
_FRAME = struct.Struct(">H")
_REPLY_BATCH = 64 << 10


@dataclass(frozen=True)
class GossipConfig:
    rings: int = overlay.DEFAULT_RINGS
    retain_rounds: int = 3
    repair_interval: float = 3.0
    send_timeout: float = 5.0
    suspect_for: float = 30.0
    max_per_origin_round: int = 64
    max_in_flight_per_peer: int = 64
    max_repair_messages: int = 4096

    def __post_init__(self) -> None:
        if self.retain_rounds < 0:
            raise ValueError("retain_rounds must be >= 0")
        if self.repair_interval < 0:
            raise ValueError("repair_interval must be >= 0 (0 turns the repair loop off)")
        if self.send_timeout <= 0 or self.suspect_for < 0:
            raise ValueError("send_timeout must be positive and suspect_for >= 0")
        if (
            min(self.max_per_origin_round, self.max_in_flight_per_peer, self.max_repair_messages)
            < 1
        ):
            raise ValueError("limits must be >= 1")


@dataclass
class GossipStats:
    published: int = 0
    delivered: int = 0
    duplicates: int = 0
    rejected: int = 0
    stale: int = 0
    pushes_sent: int = 0
    push_failures: int = 0
    push_bytes_sent: int = 0
    dropped_backlog: int = 0
    repair_pulls: int = 0
    repaired: int = 0


OnMessage = Callable[[Announcement], None]


class Gossip:
    """One node's gossip engine; construct before the transport starts (it registers protocols)."""

    def __init__(
        self,
        transport: Transport,
        topic: bytes,
        on_message: OnMessage | None = None,
        config: GossipConfig | None = None,
    ) -> None:
        if not isinstance(topic, bytes) or len(topic) != TOPIC_BYTES:
            raise ValueError(f"topic is {TOPIC_BYTES} bytes (see gossip_topic)")
        self.transport = transport
        self.topic = topic
        self.on_message = on_message
        self.config = config or GossipConfig()
        self.stats = GossipStats()
        self.current_round = 0
        self._me = transport.node_id
        self._members: dict[NodeId, PeerAddress] = {}
        self._members_version = 0
        self._messages: dict[bytes, Announcement] = {}
        self._by_round: dict[int, set[bytes]] = defaultdict(set)
        self._per_origin: dict[tuple[NodeId, int], int] = defaultdict(int)
        self._next_seq: dict[int, int] = defaultdict(int)
        self._suspects: dict[NodeId, float] = {}
        self._neighbours_cache: tuple[object, set[NodeId]] | None = None
        self._in_flight: dict[NodeId, int] = defaultdict(int)
        self._tasks: set[asyncio.Task] = set()
        self._repair_task: asyncio.Task | None = None
        transport.add_protocol(PUSH_PROTOCOL, self._on_push, max_request=MAX_ANNOUNCEMENT)
        transport.add_protocol(
            DIGEST_PROTOCOL, self._on_digest, max_request=_ROUND.size + SHORT_ID * MAX_DIGEST_IDS
        )

    # --- membership ---------------------------------------------------------------------------

    def set_members(self, peers: Iterable[PeerAddress]) -> None:
        """The run's current client list (our own entry may be included); recomputes the overlay."""
        members = {}
        for peer in peers:
            if not isinstance(peer, PeerAddress):
                raise TypeError("members are PeerAddress values")
            members[peer.node_id] = peer
        self._members = members
        self._members_version += 1

    @property
    def members(self) -> Mapping[NodeId, PeerAddress]:
        return MappingProxyType(self._members)

    def neighbours(self) -> list[PeerAddress]:
        now = asyncio.get_running_loop().time()
        suspects = frozenset(n for n, until in self._suspects.items() if until > now)
        key = (self._members_version, suspects)
        if self._neighbours_cache is None or self._neighbours_cache[0] != key:
            ids = overlay.neighbours(
                self._me,
                self._members.keys(),
                self.topic,
                rings=self.config.rings,
                exclude=suspects,
            )
            self._neighbours_cache = (key, ids)
        return [self._members[n] for n in sorted(self._neighbours_cache[1])]

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.repair_interval > 0 and self._repair_task is None:
            self._repair_task = asyncio.create_task(self._repair_loop(), name="gossip-repair")

    async def close(self) -> None:
        tasks = [t for t in [self._repair_task, *self._tasks] if t is not None]
        self._repair_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- publishing and receiving ---------------------------------------------------------------

    async def publish(self, round: int, payload: bytes) -> Announcement:
        """Sign and flood an announcement for `round` (not delivered back to ourselves)."""
        if not isinstance(round, int) or self._is_stale(round):
            raise ValueError(
                f"round {round!r} is older than the retained window (current {self.current_round})"
            )
        seq = self._next_seq[round]
        announcement = Announcement.create(self.transport.key, self.topic, round, seq, payload)
        self._next_seq[round] = seq + 1
        self._remember(announcement)
        self.stats.published += 1
        self._push_to_neighbours(announcement, skip={self._me})
        return announcement

    def received(self, round: int) -> list[Announcement]:
        """Announcements held for `round` (ours included), in (origin, seq) order."""
        found = [self._messages[i] for i in self._by_round.get(round, ())]
        return sorted(found, key=lambda a: (a.origin, a.seq))

    def advance_round(self, round: int) -> None:
        """Move the live window; announcements older than `retain_rounds` are forgotten."""
        if round <= self.current_round:
            return
        self.current_round = round
        floor = self._floor()
        for old in [r for r in self._by_round if r < floor]:
            for message_id in self._by_round.pop(old):
                gone = self._messages.pop(message_id)
                self._per_origin.pop((gone.origin, gone.round), None)
            self._next_seq.pop(old, None)

    def _floor(self) -> int:
        return max(0, self.current_round - self.config.retain_rounds)

    def _is_stale(self, round: int) -> bool:
        return round < self._floor()

    def _ingest(self, announcement: Announcement, sender: NodeId) -> bool:
        """Accept a message from the network; True if it was new. Raises RequestRejected if invalid."""
        if self._is_stale(announcement.round):
            self.stats.stale += 1
            return False
        if announcement.id in self._messages:
            self.stats.duplicates += 1
            return False
        if announcement.origin not in self._members:
            self.stats.rejected += 1
            raise RequestRejected(
                Status.FORBIDDEN, f"origin {announcement.origin!r} is not a member"
            )
        if not announcement.verify(self.topic):
            self.stats.rejected += 1
            raise RequestRejected(Status.BAD_REQUEST, "invalid announcement signature")
        if (
            self._per_origin[(announcement.origin, announcement.round)]
            >= self.config.max_per_origin_round
        ):
            self.stats.rejected += 1
            raise RequestRejected(
                Status.TOO_LARGE, "too many announcements from this origin this round"
            )
        self._remember(announcement)
        if announcement.origin == self._me:  # our own, from before a restart: pass it on only
            self._push_to_neighbours(announcement, skip={sender})
            return True
        self.stats.delivered += 1
        if self.on_message is not None:
            try:
                self.on_message(announcement)
            except Exception:
                log.exception("gossip on_message failed for %r", announcement)
        self._push_to_neighbours(announcement, skip={sender, announcement.origin})
        return True

    def _remember(self, announcement: Announcement) -> None:
        self._messages[announcement.id] = announcement
        self._by_round[announcement.round].add(announcement.id)
        self._per_origin[(announcement.origin, announcement.round)] += 1

    async def _on_push(self, peer: NodeId, body: bytes, reply: ReplyWriter) -> None:
        try:
            announcement = Announcement.decode(body)
        except ValueError as e:
            self.stats.rejected += 1
            raise RequestRejected(Status.BAD_REQUEST, str(e)) from None
        self._ingest(announcement, peer)

    # --- pushing ------------------------------------------------------------------------------

    def _push_to_neighbours(self, announcement: Announcement, skip: set[NodeId]) -> None:
        data = announcement.encode()
        for peer in self.neighbours():
            if peer.node_id in skip:
                continue
            if self._in_flight[peer.node_id] >= self.config.max_in_flight_per_peer:
                self.stats.dropped_backlog += 1  # repair will carry it
                continue
            self._in_flight[peer.node_id] += 1
            self._spawn(self._push(peer, data))

    async def _push(self, peer: PeerAddress, data: bytes) -> None:
        try:
            async with asyncio.timeout(self.config.send_timeout):
                async with self.transport.request(
                    peer, PUSH_PROTOCOL, data, open_timeout=self.config.send_timeout
                ) as reply:
                    while await reply.read():
                        pass
            self.stats.pushes_sent += 1
            self.stats.push_bytes_sent += len(data)
        except (TransportError, TimeoutError) as e:
            self.stats.push_failures += 1
            self._suspect(peer.node_id, e)
        finally:
            self._in_flight[peer.node_id] -= 1

    def _suspect(self, node_id: NodeId, error: BaseException) -> None:
        log.info("gossip to %r failed (%s); using the next node on its rings", node_id, error)
        if self.config.suspect_for > 0:
            self._suspects[node_id] = asyncio.get_running_loop().time() + self.config.suspect_for

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- repair -------------------------------------------------------------------------------

    async def repair_now(self) -> int:
        """Pull missing announcements from every neighbour now; returns how many arrived."""
        results = await asyncio.gather(*(self._pull(p) for p in self.neighbours()))
        return sum(results)

    async def _repair_loop(self) -> None:
        while True:
            interval = self.config.repair_interval
            await asyncio.sleep(interval * random.uniform(0.8, 1.2))  # spread nodes apart
            try:
                await self.repair_now()
            except Exception:
                log.exception("gossip repair failed")

    def _digest(self) -> bytes:
        floor = self._floor()
        ids: list[bytes] = []
        for round in sorted(self._by_round, reverse=True):  # newest first if we must truncate
            if round >= floor:
                ids.extend(i[:SHORT_ID] for i in self._by_round[round])
        return _ROUND.pack(floor) + b"".join(ids[:MAX_DIGEST_IDS])

    async def _pull(self, peer: PeerAddress) -> int:
        self.stats.repair_pulls += 1
        new = 0
        try:
            async with asyncio.timeout(self.config.send_timeout):
                async with self.transport.request(
                    peer, DIGEST_PROTOCOL, self._digest(), open_timeout=self.config.send_timeout
                ) as reply:
                    async for data in repair_frames(reply):
                        try:
                            announcement = Announcement.decode(data)
                            new += self._ingest(announcement, peer.node_id)
                        except (ValueError, RequestRejected) as e:
                            log.info("repair from %r sent a bad announcement: %s", peer.node_id, e)
        except (TransportError, TimeoutError, ValueError) as e:
            self._suspect(peer.node_id, e)
        self.stats.repaired += new
        return new

    async def _on_digest(self, peer: NodeId, body: bytes, reply: ReplyWriter) -> None:
        if len(body) < _ROUND.size or (len(body) - _ROUND.size) % SHORT_ID:
            raise RequestRejected(
                Status.BAD_REQUEST, "a digest is a u64 round and 8-byte id prefixes"
            )
        (floor,) = _ROUND.unpack_from(body)
        held = {body[i : i + SHORT_ID] for i in range(_ROUND.size, len(body), SHORT_ID)}
        floor = max(floor, self._floor())
        batch = bytearray()
        sent = 0
        for round in sorted(r for r in self._by_round if r >= floor):
            for message_id in list(self._by_round.get(round, ())):
                announcement = self._messages.get(message_id)  # may be pruned while we write
                if announcement is None or message_id[:SHORT_ID] in held:
                    continue
                if sent >= self.config.max_repair_messages:
                    break
                data = announcement.encode()
                batch += _FRAME.pack(len(data)) + data
                sent += 1
                if len(batch) >= _REPLY_BATCH:
                    await reply.write(bytes(batch))
                    batch.clear()
        await reply.write(bytes(batch))


async def repair_frames(reply: Reply) -> AsyncIterator[bytes]:
    """Split a digest reply into announcements (u16 length-prefixed)."""
    buffer = bytearray()
    while True:
        chunk = await reply.read()
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= _FRAME.size:
            (length,) = _FRAME.unpack_from(buffer)
            if length > MAX_ANNOUNCEMENT:
                raise ValueError(f"repair frame of {length} bytes exceeds {MAX_ANNOUNCEMENT}")
            if len(buffer) < _FRAME.size + length:
                break
            yield bytes(buffer[_FRAME.size : _FRAME.size + length])
            del buffer[: _FRAME.size + length]
    if buffer:
        raise ValueError("repair reply ends inside a frame")
