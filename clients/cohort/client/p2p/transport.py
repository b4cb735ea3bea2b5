"""The transport contract every implementation (iroh, plain HTTP) keeps.

A transport carries *requests*: a small body sent to a named protocol on a peer, answered by a
status and then a byte stream of any length. Protocols (blobs, gossip, digests) are handlers
registered by name. The contract:

* every request is authenticated: the handler learns the requester's node id, and requests from
  nodes outside the allowlist are refused (`PeerRejected` on the requester's side);
* a request body is at most the protocol's `max_request` bytes (`Status.TOO_LARGE` otherwise);
* a handler answers with `Reply.write` calls or refuses with `RequestRejected`; if it fails after
  writing, the stream is cut and the requester sees `StreamBroken`, never a silently short reply;
* `request` returns once the peer has answered with a status, within `open_timeout`; reading the
  body has no built-in deadline: callers wrap `read` in their own progress deadline and leave the
  `request` block on a stall (which cuts the stream);
* bad input from a peer only costs that stream: the node keeps serving others.
"""

from __future__ import annotations

import abc
import asyncio
import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from .allowlist import Allowlist
from .identity import NodeId, NodeKey

MAX_PROTOCOL_NAME = 64
DEFAULT_OPEN_TIMEOUT = 5.0
MAX_LANES = 4  # connections one transport may keep to one peer (see `request`)
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class PeerAddress:
    """How to reach a node: its id plus direct `host:port` addresses and an optional relay."""

    node_id: NodeId
    addrs: tuple[str, ...] = ()
    relay_url: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, NodeId):
            raise TypeError("PeerAddress.node_id must be a NodeId")
        if isinstance(self.addrs, str):
            raise TypeError("PeerAddress.addrs is a tuple of 'host:port' strings, not one string")
        for addr in self.addrs:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"bad peer address {addr!r}: expected 'host:port'")
        if not self.addrs and self.relay_url is None:
            raise ValueError(f"peer {self.node_id!r} has neither a direct address nor a relay")


class Status(enum.IntEnum):
    """Answer to a request; every non-OK status comes with a short message."""

    OK = 0
    BAD_REQUEST = 1
    NOT_FOUND = 2
    TOO_LARGE = 3
    FORBIDDEN = 4
    UNKNOWN_PROTOCOL = 5
    INTERNAL = 6
    BUSY = 7  # serving as many copies as it will at once: ask another holder, or again shortly


class TransportError(Exception):
    """A request to a peer did not complete; try another peer."""


class PeerUnreachable(TransportError):
    """Could not connect, or the peer did not answer within the open timeout."""


class PeerRejected(TransportError):
    """The peer refused us: we are not on its allowlist."""


class StreamBroken(TransportError):
    """The reply stopped before its end (peer died, reset the stream, or we aborted it)."""


class RemoteError(TransportError):
    """The peer answered the request with an error status."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(f"{status.name}: {message}")
        self.status = status
        self.message = message


class RequestRejected(Exception):
    """Raised by a protocol handler to answer with an error status instead of data."""

    def __init__(self, status: Status, message: str) -> None:
        if status == Status.OK:
            raise ValueError("RequestRejected needs an error status")
        super().__init__(f"{status.name}: {message}")
        self.status = status
        self.message = message


class ReplyWriter(Protocol):
    """Server side of a reply: the first write sends status OK."""

    async def write(self, data: bytes) -> None: ...

    async def background(self) -> None:
        """Send this reply only when the others on its connection have nothing to send (a member's
        results go before the committed states it serves to checks); before the first write."""
        ...


class Reply(Protocol):
    """Client side of a reply (status OK already received)."""

    async def read(self, max_bytes: int = READ_CHUNK) -> bytes:
        """Up to `max_bytes` of the body; b"" at its end. Raises StreamBroken if it was cut."""
        ...

    async def close(self) -> None:
        """Release the reply; cuts the stream if its end was not read (e.g. after a stall)."""
        ...


Handler = Callable[[NodeId, bytes, ReplyWriter], Awaitable[None]]


@dataclass(frozen=True)
class ProtocolSpec:
    handler: Handler
    max_request: int


@dataclass
class TransportStats:
    requests_sent: int = 0
    request_bytes_sent: int = 0
    requests_served: int = 0
    requests_refused: int = 0
    dials: int = (
        0  # connections dialled (each a handshake on both sides), where the transport keeps them
    )
    extra: dict[str, int] = field(default_factory=dict)


class Transport(abc.ABC):
    """A node's endpoint: serves registered protocols and sends requests to peers."""

    def __init__(self, key: NodeKey, allowlist: Allowlist) -> None:
        if not isinstance(key, NodeKey):
            raise TypeError("key must be a NodeKey")
        if not isinstance(allowlist, Allowlist):
            raise TypeError("allowlist must be an Allowlist")
        self.key = key
        self.allowlist = allowlist
        self.stats = TransportStats()
        self._protocols: dict[str, ProtocolSpec] = {}

    @property
    def node_id(self) -> NodeId:
        return self.key.node_id

    def add_protocol(self, name: str, handler: Handler, *, max_request: int) -> None:
        """Serve `name`; requests larger than `max_request` bytes are refused with TOO_LARGE."""
        check_protocol_name(name)
        if name in self._protocols:
            raise ValueError(f"protocol {name!r} is already registered")
        if max_request < 0:
            raise ValueError("max_request must be >= 0")
        self._protocols[name] = ProtocolSpec(handler, max_request)

    @property
    @abc.abstractmethod
    def address(self) -> PeerAddress:
        """What other nodes dial to reach us (valid after `start`)."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def _open(self, peer: PeerAddress, protocol: str, body: bytes, lane: int = 0) -> Reply:
        """Send the request and wait for the status; the caller bounds the time."""

    @abc.abstractmethod
    async def disconnect(self, node_id: NodeId) -> None:
        """Drop any cached connection to `node_id`, so the next request redials."""

    def liveness(self, node_id: NodeId) -> object:
        """A mark of what our connections to `node_id` have heard so far, for `stalled`."""
        return None

    async def stalled(self, node_id: NodeId, mark: object) -> None:
        """A request to `node_id` got no answer (or no bytes) in time since `mark` (a `liveness`): drop
        its cached connections unless the transport knows they heard from the peer since. A peer whose
        process is slow (overloaded) still acknowledges packets, and redialling it only adds handshakes to
        its load and cuts its other streams; a gone peer hears nothing, and the next request redials."""
        await self.disconnect(node_id)

    @asynccontextmanager
    async def request(
        self,
        peer: PeerAddress,
        protocol: str,
        body: bytes,
        *,
        open_timeout: float = DEFAULT_OPEN_TIMEOUT,
        lane: int = 0,
    ) -> AsyncIterator[Reply]:
        """Send `body` to `protocol` on `peer` and yield the reply stream.

        Requests on different `lane`s (0..MAX_LANES-1) to one peer go over separate connections where
        the transport keeps them (QUIC: each with its own congestion window), so parts of one blob
        fetched side by side are not held to one connection's recovery from loss.

        Raises PeerUnreachable, PeerRejected, RemoteError (error status) or StreamBroken.
        """
        if not isinstance(peer, PeerAddress):
            raise TypeError("peer must be a PeerAddress")
        check_protocol_name(protocol)
        if not isinstance(body, bytes):
            raise TypeError("request body must be bytes")
        if open_timeout <= 0:
            raise ValueError("open_timeout must be positive")
        if not isinstance(lane, int) or not 0 <= lane < MAX_LANES:
            raise ValueError(f"lane must be 0..{MAX_LANES - 1}, got {lane!r}")
        mark = self.liveness(peer.node_id)
        try:
            async with asyncio.timeout(open_timeout):
                reply = await self._open(peer, protocol, body, lane)
        except TimeoutError as e:
            await self.stalled(peer.node_id, mark)  # a connection that heard nothing is not reused
            raise PeerUnreachable(
                f"{peer.node_id!r} did not answer {protocol!r} within {open_timeout:g} s"
            ) from e
        self.stats.requests_sent += 1
        self.stats.request_bytes_sent += len(body)
        try:
            yield reply
        finally:
            await reply.close()

    def _spec(self, protocol: str) -> ProtocolSpec | None:
        return self._protocols.get(protocol)

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def check_protocol_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_PROTOCOL_NAME:
        raise ValueError(f"protocol name must be 1..{MAX_PROTOCOL_NAME} bytes, got {name!r:.80}")
    if not all(c.isalnum() or c in "/-_." for c in name) or not name.isascii():
        raise ValueError(f"protocol name may hold ASCII letters, digits and / - _ . only: {name!r}")
