"""Gossip: signed announcements flooded over the overlay, with digest repair.

On first receipt a node checks the announcement (known origin, valid signature, live round), hands
it to the application once, and pushes it to its overlay neighbours except the one it came from: in a
large run only to those of the first `push_rings` rings (half the degree, about half the push requests
every node sends and serves per announcement, which are most of a member's CPU per round); the other
rings' neighbours still exchange digests with it, so they repair what a silent pusher withholds.
Pushes to a neighbour go one at a time, each carrying everything that waits for it: what comes while
one is in flight leaves with the next. No timer holds a push back, so a quiet link adds no latency,
and the longer a link's round trip (or the busier the node), the more each push carries: each request
costs its two ends far more CPU than its bytes do.
Every `repair_interval` seconds (and on `repair_now`, e.g. at round close) each node sends its
neighbours, and one random other member (a probe), a digest of the ids it holds; they answer with
what it is missing. So a message lost to a dead link, a full queue or a late membership update still
arrives.

Members are peers, not friends, so everything a member can make us hold or send is bounded: only
rounds in a small window around the current one are accepted (`retain_rounds` back,
`future_rounds` ahead); each origin may have at most `max_per_origin_round` announcements in one
round and `max_messages_per_origin` / `max_bytes_per_origin` in the whole window (signed statements aside,
below); a digest reply carries at most `max_repair_messages` / `max_repair_bytes`, and a peer gets at most
`max_digests_per_peer` replies at once. A neighbour that stays silent while others (the probe
included) deliver what it should have passed on is suspected after `silent_strikes` repairs, and
the next node on its rings takes its place.

Statements pass every quota: with `statement` set (the application's reader of what an announcement states,
e.g. a result's commitment, with its signature checked), an origin's first `statements_per_round` different
statements of a round are taken even when its quota is spent. Two different ones prove that it equivocated,
so an origin cannot keep them apart by pushing each to some peers with fillers enough to fill the quota
there: each reaches every peer, by push and by repair, and every peer can report it.

Protocols (over any transport):
    push    request = (u16 length | announcement)+ (at most MAX_PUSH_REQUEST bytes); empty reply
    digest  request = u64 oldest round | 8-byte id prefixes held; reply = (u16 length | announcement)*
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from . import overlay
from .announcement import MAX_ANNOUNCEMENT, TOPIC_BYTES, Announcement
from .identity import NodeId
from .transport import (
    PeerAddress,
    RemoteError,
    Reply,
    ReplyWriter,
    RequestRejected,
    Status,
    Transport,
    TransportError,
)

log = logging.getLogger(__name__)

PUSH_PROTOCOL = "cohort/gossip/push/2"
DIGEST_PROTOCOL = "cohort/gossip/digest/1"
SHORT_ID = 8
MAX_DIGEST_IDS = 16384
_ROUND = struct.Struct(">Q")
_FRAME = struct.Struct(">H")
_REPLY_BATCH = 64 << 10
MAX_PUSH_REQUEST = 64 << 10  # one push: whole frames only


@dataclass(frozen=True)
class GossipConfig:
    rings: int = overlay.DEFAULT_RINGS
    push_rings: int = 2  # rings whose neighbours we push to (at most `rings`); the rest only repair
    retain_rounds: int = 3
    repair_interval: float = 3.0
    send_timeout: float = 5.0
    suspect_for: float = 30.0
    future_rounds: int = 2
    max_per_origin_round: int = 64
    max_messages_per_origin: int = 128
    max_bytes_per_origin: int = 256 << 10
    max_in_flight_per_peer: int = 64  # announcements queued for, or being pushed to, one peer
    max_repair_messages: int = 512
    max_repair_bytes: int = 1 << 20
    max_digests_per_peer: int = 2
    probe_peers: int = 1
    silent_strikes: int = 3
    statements_per_round: int = (
        2  # different statements an origin may have held per round beyond its quota
    )

    def __post_init__(self) -> None:
        if self.retain_rounds < 0 or self.future_rounds < 0:
            raise ValueError("retain_rounds and future_rounds must be >= 0")
        if self.push_rings < 1:
            raise ValueError("push_rings must be >= 1")
        if self.statements_per_round < 0:
            raise ValueError("statements_per_round must be >= 0")
        if self.probe_peers < 0 or self.silent_strikes < 0:
            raise ValueError("probe_peers and silent_strikes must be >= 0 (0 turns them off)")
        if self.repair_interval < 0:
            raise ValueError("repair_interval must be >= 0 (0 turns the repair loop off)")
        if self.send_timeout <= 0 or self.suspect_for < 0:
            raise ValueError("send_timeout must be positive and suspect_for >= 0")
        limits = (
            self.max_per_origin_round,
            self.max_messages_per_origin,
            self.max_in_flight_per_peer,
            self.max_repair_messages,
            self.max_digests_per_peer,
        )
        if min(limits) < 1:
            raise ValueError("limits must be >= 1")
        if min(self.max_bytes_per_origin, self.max_repair_bytes) < MAX_ANNOUNCEMENT:
            raise ValueError(f"byte limits must be >= one announcement ({MAX_ANNOUNCEMENT} bytes)")


@dataclass
class GossipStats:
    published: int = 0
    delivered: int = 0
    duplicates: int = 0
    rejected: int = 0
    stale: int = 0
    future: int = 0
    over_quota: int = 0
    pushes_sent: int = 0  # announcements pushed (a push request carries one or more)
    push_requests: int = 0
    push_failures: int = 0
    push_bytes_sent: int = 0
    dropped_backlog: int = 0
    repair_pulls: int = 0
    repaired: int = 0
    silent_suspected: int = 0
    push_bytes_received: int = 0
    repair_bytes_sent: int = 0
    repair_bytes_received: int = 0


@dataclass
class _Usage:
    """What one origin has in our store across the live window."""

    messages: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class _Pulled:
    """One repair pull: announcements new to us, and live ones offered (new or already held)."""

    new: int
    offered: int


OnMessage = Callable[[Announcement], None]
# what a signed statement inside an announcement states (a key: equal keys are one statement), or None for
# anything else; it must check the statement's signature by the origin, else fillers could pass as statements
StatementOf = Callable[[Announcement], bytes | None]


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
        self.statement: StatementOf | None = (
            None  # set by the application: see the module's docstring
        )
        self.config = config or GossipConfig()
        self.stats = GossipStats()
        self.current_round = 0
        self._me = transport.node_id
        self._members: dict[NodeId, PeerAddress] = {}
        self._members_version = 0
        self._ring_seed = topic
        self._messages: dict[bytes, Announcement] = {}
        self._by_round: dict[int, set[bytes]] = defaultdict(set)
        self._per_origin: dict[tuple[NodeId, int], int] = defaultdict(int)
        self._statements: dict[
            tuple[NodeId, int], set[bytes]
        ] = {}  # (origin, round) -> what it stated
        self._origin_use: dict[NodeId, _Usage] = {}
        self._next_seq: dict[int, int] = defaultdict(int)
        self._suspects: dict[NodeId, float] = {}
        self._neighbours_cache: tuple[object, set[NodeId], set[NodeId]] | None = (
            None  # key, all, pushed to
        )
        self._in_flight: dict[NodeId, int] = {}  # announcements of the push in flight to each peer
        self._outbox: dict[
            NodeId, list[bytes]
        ] = {}  # encoded, waiting for the push in flight to end
        self._pushing: set[NodeId] = set()  # peers with a push task running
        self._digests_serving: dict[NodeId, int] = defaultdict(int)
        self._strikes: dict[NodeId, int] = defaultdict(int)
        self._heard_from: set[NodeId] = set()  # peers that pushed us announcements lately
        self._tasks: set[asyncio.Task] = set()
        self._repair_task: asyncio.Task | None = None
        transport.add_protocol(PUSH_PROTOCOL, self._on_push, max_request=MAX_PUSH_REQUEST)
        transport.add_protocol(
            DIGEST_PROTOCOL, self._on_digest, max_request=_ROUND.size + SHORT_ID * MAX_DIGEST_IDS
        )

    # --- membership ---------------------------------------------------------------------------

    def set_members(self, peers: Iterable[PeerAddress], overlay_key: bytes | None = None) -> None:
        """The run's current client list (our own entry may be included); recomputes the overlay.

        `overlay_key` (e.g. the epoch's first round seed) places members on the overlay's rings by a
        value nobody knew when choosing their keys, so ground keys cannot surround a victim. Every
        member must pass the same key; None orders by the public topic alone.
        """
        members = {}
        for peer in peers:
            if not isinstance(peer, PeerAddress):
                raise TypeError("members are PeerAddress values")
            members[peer.node_id] = peer
        for (
            node_id,
            peer,
        ) in members.items():  # a member at a new address restarted: its old failures are moot
            if node_id in self._members and self._members[node_id] != peer:
                self._suspects.pop(node_id, None)
        self._ring_seed = overlay.ring_seed(self.topic, overlay_key)
        self._members = members
        self._members_version += 1
        self._strikes.clear()

    @property
    def members(self) -> Mapping[NodeId, PeerAddress]:
        return MappingProxyType(self._members)

    def neighbours(self) -> list[PeerAddress]:
        """Our overlay neighbours: whom we exchange digests with (and, in a small run, push to)."""
        return [self._members[n] for n in sorted(self._overlay()[0])]

    def push_targets(self) -> list[PeerAddress]:
        """The neighbours we push new announcements to: every one in a full mesh, else those of the first
        `push_rings` rings (the undirected graph they form keeps its diameter near log N)."""
        return [self._members[n] for n in sorted(self._overlay()[1])]

    def _overlay(self) -> tuple[set[NodeId], set[NodeId]]:
        now = asyncio.get_running_loop().time()
        suspects = frozenset(n for n, until in self._suspects.items() if until > now)
        key = (self._members_version, suspects)
        if self._neighbours_cache is None or self._neighbours_cache[0] != key:
            members, rings = self._members.keys(), self.config.rings
            ids = overlay.neighbours(
                self._me, members, self._ring_seed, rings=rings, exclude=suspects
            )
            usual = overlay.neighbours(self._me, members, self._ring_seed, rings=rings)
            if suspects and len(ids) < len(usual):
                # a suspect is skipped only for a replacement: in a small run (a full mesh) none exists,
                # and leaving it out could leave us no one to push to (a startup refusal suspects a peer
                # for `suspect_for`); a push to a dead suspect costs one bounded background task
                ids = ids | (usual & suspects)
            pushed = ids
            if len(usual) < len(members) - (self._me in members) and self.config.push_rings < rings:
                pushed = ids & overlay.neighbours(self._me, members, self._ring_seed,
                                                  rings=self.config.push_rings, exclude=suspects)  # fmt: skip
            self._neighbours_cache = (key, ids, pushed)
        return self._neighbours_cache[1], self._neighbours_cache[2]

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
        if self._is_future(round):
            raise ValueError(
                f"round {round} is more than {self.config.future_rounds} rounds ahead of the"
                f" current one ({self.current_round}); peers would drop it"
            )
        seq = self._next_seq[round]
        announcement = Announcement.create(self.transport.key, self.topic, round, seq, payload)
        quota = self._over_quota(announcement)
        if quota is not None:
            raise ValueError(f"not published: {quota}")
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
                self._forget(self._messages.pop(message_id))
            self._next_seq.pop(old, None)

    def _floor(self) -> int:
        return max(0, self.current_round - self.config.retain_rounds)

    def _is_stale(self, round: int) -> bool:
        return round < self._floor()

    def _is_future(self, round: int) -> bool:
        return round > self.current_round + self.config.future_rounds

    def _over_quota(self, announcement: Announcement) -> str | None:
        """Why holding `announcement` would exceed its origin's share, or None if it fits (or is one of the
        origin's first different statements of its round, which always fit)."""
        reason = self._quota(announcement)
        if reason is None or self.statement is None:
            return reason
        stated = self._statements.get((announcement.origin, announcement.round), set())
        if len(stated) < self.config.statements_per_round:
            key = self._statement_of(announcement)
            if key is not None and key not in stated:
                return None
        return reason

    def _statement_of(self, announcement: Announcement) -> bytes | None:
        if self.statement is None:
            return None
        try:
            return self.statement(announcement)
        except Exception:
            log.exception("gossip statement reader failed for %r", announcement)
            return None

    def _quota(self, announcement: Announcement) -> str | None:
        config = self.config
        if self._per_origin.get((announcement.origin, announcement.round), 0) >= (
            config.max_per_origin_round
        ):
            return (
                f"origin has {config.max_per_origin_round} announcements in round"
                f" {announcement.round}"
            )
        use = self._origin_use.get(announcement.origin)
        if use is None:
            return None
        if use.messages >= config.max_messages_per_origin:
            return f"origin holds {config.max_messages_per_origin} announcements in the live window"
        if use.bytes + announcement.size > config.max_bytes_per_origin:
            return (
                f"origin holds {use.bytes} bytes of announcements"
                f" (limit {config.max_bytes_per_origin})"
            )
        return None

    def _ingest(self, announcement: Announcement, sender: NodeId) -> bool:
        """Accept a message from the network; True if it was new. Raises RequestRejected if invalid."""
        if self._is_stale(announcement.round):
            self.stats.stale += 1
            return False
        if self._is_future(announcement.round):  # would be held for rounds: refuse until it is live
            self.stats.future += 1
            return False
        if announcement.id in self._messages:
            self.stats.duplicates += 1
            self._heard_from.add(sender)  # passing things on, only not first
            return False
        if announcement.origin not in self._members:
            self.stats.rejected += 1
            raise RequestRejected(
                Status.FORBIDDEN, f"origin {announcement.origin!r} is not a member"
            )
        if not announcement.verify(self.topic):
            self.stats.rejected += 1
            raise RequestRejected(Status.BAD_REQUEST, "invalid announcement signature")
        quota = self._over_quota(announcement)
        if quota is not None:
            self.stats.over_quota += 1
            raise RequestRejected(Status.TOO_LARGE, quota)
        self._remember(announcement)
        self._heard_from.add(sender)
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
        key = self._statement_of(announcement)
        if key is not None:
            self._statements.setdefault((announcement.origin, announcement.round), set()).add(key)
        use = self._origin_use.setdefault(announcement.origin, _Usage())
        use.messages += 1
        use.bytes += announcement.size

    def _forget(self, announcement: Announcement) -> None:
        self._per_origin.pop((announcement.origin, announcement.round), None)
        self._statements.pop((announcement.origin, announcement.round), None)
        use = self._origin_use[announcement.origin]
        use.messages -= 1
        use.bytes -= announcement.size
        if use.messages == 0:
            del self._origin_use[announcement.origin]

    async def _on_push(self, peer: NodeId, body: bytes, reply: ReplyWriter) -> None:
        """Take every valid announcement of the push; a bad one does not cost the others their place,
        but the pusher hears of it (the status and reason of the first one refused)."""
        self.stats.push_bytes_received += len(body)
        buffer = bytearray(body)
        try:
            frames = list(take_frames(buffer))
            if buffer or not frames:
                raise ValueError("a push is whole (u16 length | announcement) frames, at least one")
        except ValueError as e:
            self.stats.rejected += 1
            raise RequestRejected(Status.BAD_REQUEST, str(e)) from None
        first: RequestRejected | None = None
        refused = 0
        for data in frames:
            try:
                self._ingest(Announcement.decode(data), peer)
            except ValueError as e:
                self.stats.rejected += 1
                error = RequestRejected(Status.BAD_REQUEST, str(e))
            except RequestRejected as e:
                error = e
            else:
                continue
            refused += 1
            first = first or error
        if first is not None:
            raise RequestRejected(
                first.status,
                f"{refused} of {len(frames)} announcements refused; the first: {first.message}",
            )

    # --- pushing ------------------------------------------------------------------------------

    def _push_to_neighbours(self, announcement: Announcement, skip: set[NodeId]) -> None:
        data = announcement.encode()
        for peer in self.push_targets():
            node = peer.node_id
            if node in skip:
                continue
            queue = self._outbox.setdefault(node, [])
            if len(queue) + self._in_flight.get(node, 0) >= self.config.max_in_flight_per_peer:
                self.stats.dropped_backlog += 1  # repair will carry it
                continue
            queue.append(data)
            if node not in self._pushing:
                self._pushing.add(node)
                self._spawn(self._push(peer))

    async def _push(self, peer: PeerAddress) -> None:
        """Push what waits for `peer`, one request at a time, until nothing does."""
        node = peer.node_id
        try:
            while queue := self._outbox.get(node):
                batch = _take_batch(queue)
                self._in_flight[node] = len(batch)
                body = push_body(batch)
                peer = self._members.get(node, peer)  # it may have moved (restarted) meanwhile
                try:
                    async with asyncio.timeout(self.config.send_timeout):
                        async with self.transport.request(
                            peer, PUSH_PROTOCOL, body, open_timeout=self.config.send_timeout
                        ) as reply:
                            while await reply.read():
                                pass
                except (
                    RemoteError
                ) as e:  # it answered (and kept what it accepted): the rest still goes
                    self.stats.push_failures += 1
                    self._suspect(node, e)
                    continue
                except (TransportError, TimeoutError) as e:
                    self.stats.push_failures += 1
                    self.stats.dropped_backlog += len(
                        self._outbox.pop(node, ())
                    )  # repair carries them
                    self._suspect(node, e)
                    return
                self.stats.push_requests += 1
                self.stats.pushes_sent += len(batch)
                self.stats.push_bytes_sent += len(body)
        finally:
            self._in_flight.pop(node, None)
            self._pushing.discard(node)
            if not self._outbox.get(node):
                self._outbox.pop(node, None)

    def _suspect(self, node_id: NodeId, why: BaseException | str) -> None:
        log.info("gossip with %r failed (%s); using the next node on its rings", node_id, why)
        if self.config.suspect_for > 0:
            now = asyncio.get_running_loop().time()
            for expired in [n for n, until in self._suspects.items() if until <= now]:
                del self._suspects[expired]
            self._suspects[node_id] = now + self.config.suspect_for

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- repair -------------------------------------------------------------------------------

    async def repair_now(self) -> int:
        """Pull missing announcements from every neighbour and the probes now; returns how many
        arrived. Neighbours that gave nothing while others did get a strike (see `_judge`)."""
        neighbours = self.neighbours()
        probes = self._probes(neighbours)
        peers = neighbours + probes
        results = await asyncio.gather(*(self._pull(p) for p in peers))
        self._judge(
            [p.node_id for p in neighbours],
            {p.node_id: r for p, r in zip(peers, results, strict=True)},
        )
        return sum(r.new for r in results)

    def _probes(self, neighbours: list[PeerAddress]) -> list[PeerAddress]:
        """A few random members beyond the overlay: a way around neighbours that stay silent."""
        skip = {p.node_id for p in neighbours} | {self._me}
        others = [p for n, p in self._members.items() if n not in skip]
        return random.sample(others, min(self.config.probe_peers, len(others)))

    def _judge(self, neighbours: list[NodeId], pulled: Mapping[NodeId, _Pulled]) -> None:
        """A neighbour that pushed us nothing since the last repair and offered nothing for our
        digest, while other peers had new messages for us, failed to pass them on: one strike.
        After `silent_strikes` in a row it is suspected, so the next node on its rings replaces it."""
        heard, self._heard_from = self._heard_from, set()
        limit = self.config.silent_strikes
        total_new = sum(r.new for r in pulled.values())
        for node_id in neighbours:
            result = pulled.get(node_id)
            if (result is not None and result.offered) or node_id in heard or total_new == 0:
                self._strikes.pop(node_id, None)
                continue
            self._strikes[node_id] += 1
            if limit and self._strikes[node_id] >= limit:
                del self._strikes[node_id]
                self.stats.silent_suspected += 1
                self._suspect(node_id, f"silent for {limit} repairs while others delivered")

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

    async def _pull(self, peer: PeerAddress) -> _Pulled:
        """Ask `peer` for what we miss; reads at most one reply's worth (`max_repair_*`)."""
        self.stats.repair_pulls += 1
        config = self.config
        new = offered = frames = received = bad = 0
        last_error: Exception | None = None
        try:
            async with asyncio.timeout(config.send_timeout):
                async with self.transport.request(
                    peer, DIGEST_PROTOCOL, self._digest(), open_timeout=config.send_timeout
                ) as reply:
                    async for data in repair_frames(reply):
                        frames += 1
                        received += len(data)
                        self.stats.repair_bytes_received += len(data)
                        if (
                            frames > config.max_repair_messages
                            or received > config.max_repair_bytes
                        ):
                            break  # more than any honest reply carries: leaving cuts the stream
                        try:
                            announcement = Announcement.decode(data)
                            new += self._ingest(announcement, peer.node_id)
                            offered += announcement.id in self._messages  # new or a duplicate
                        except (ValueError, RequestRejected) as e:
                            bad += 1
                            last_error = e
        except (TransportError, TimeoutError, ValueError) as e:
            self._suspect(peer.node_id, e)
        if bad:
            log.info("repair from %r: %d announcements refused (%s)", peer.node_id, bad, last_error)
        self.stats.repaired += new
        return _Pulled(new, offered)

    async def _on_digest(self, peer: NodeId, body: bytes, reply: ReplyWriter) -> None:
        if len(body) < _ROUND.size or (len(body) - _ROUND.size) % SHORT_ID:
            raise RequestRejected(
                Status.BAD_REQUEST, "a digest is a u64 round and 8-byte id prefixes"
            )
        config = self.config
        if self._digests_serving[peer] >= config.max_digests_per_peer:
            raise RequestRejected(
                Status.TOO_LARGE, f"{config.max_digests_per_peer} digest replies already running"
            )
        self._digests_serving[peer] += 1
        try:
            await self._answer_digest(body, reply)
        finally:
            self._digests_serving[peer] -= 1
            if not self._digests_serving[peer]:
                del self._digests_serving[peer]

    async def _answer_digest(self, body: bytes, reply: ReplyWriter) -> None:
        """What the digest lacks, oldest round first, up to `max_repair_messages`/`_bytes`."""
        config = self.config
        (floor,) = _ROUND.unpack_from(body)
        held = {body[i : i + SHORT_ID] for i in range(_ROUND.size, len(body), SHORT_ID)}
        floor = max(floor, self._floor())
        batch = bytearray()
        sent = sent_bytes = 0
        for round in sorted(r for r in self._by_round if r >= floor):
            for message_id in list(self._by_round.get(round, ())):
                announcement = self._messages.get(message_id)  # may be pruned while we write
                if announcement is None or message_id[:SHORT_ID] in held:
                    continue
                if (
                    sent >= config.max_repair_messages
                    or sent_bytes + announcement.size > config.max_repair_bytes
                ):
                    self.stats.repair_bytes_sent += len(batch)
                    await reply.write(bytes(batch))
                    return  # the rest comes with the next repair
                data = announcement.encode()
                batch += _FRAME.pack(len(data)) + data
                sent += 1
                sent_bytes += len(data)
                if len(batch) >= _REPLY_BATCH:
                    self.stats.repair_bytes_sent += len(batch)
                    await reply.write(bytes(batch))
                    batch.clear()
        self.stats.repair_bytes_sent += len(batch)
        await reply.write(bytes(batch))


def push_body(encoded: Iterable[bytes]) -> bytes:
    """A push request of encoded announcements: (u16 length | announcement)*."""
    return b"".join(_FRAME.pack(len(data)) + data for data in encoded)


def _take_batch(queue: list[bytes]) -> list[bytes]:
    """Take from the front of `queue` the announcements of one push (MAX_PUSH_REQUEST bytes at most)."""
    size = count = 0
    for data in queue:
        if count and size + _FRAME.size + len(data) > MAX_PUSH_REQUEST:
            break
        size += _FRAME.size + len(data)
        count += 1
    batch = queue[:count]
    del queue[:count]
    return batch


def take_frames(buffer: bytearray) -> Iterator[bytes]:
    """Yield (and remove from `buffer`) the whole u16 length-prefixed announcements at its front; what
    is left is the start of a frame not yet complete."""
    while len(buffer) >= _FRAME.size:
        (length,) = _FRAME.unpack_from(buffer)
        if length > MAX_ANNOUNCEMENT:
            raise ValueError(
                f"a frame of {length} bytes exceeds an announcement's {MAX_ANNOUNCEMENT}"
            )
        if len(buffer) < _FRAME.size + length:
            return
        yield bytes(buffer[_FRAME.size : _FRAME.size + length])
        del buffer[: _FRAME.size + length]


async def repair_frames(reply: Reply) -> AsyncIterator[bytes]:
    """Split a digest reply into announcements (u16 length-prefixed)."""
    buffer = bytearray()
    while True:
        chunk = await reply.read()
        if not chunk:
            break
        buffer += chunk
        for frame in take_frames(buffer):
            yield frame
    if buffer:
        raise ValueError("repair reply ends inside a frame")
