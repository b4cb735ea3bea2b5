"""Transport over iroh (QUIC with Ed25519 node ids, hole punching, optional relays).

One ALPN carries every protocol. Each request is one bidirectional stream:

    request  = u8 name length | protocol name | u32 body length | body | FIN
    response = u8 status | body (status OK) or UTF-8 message (error) | FIN

One connection per peer and lane (`Transport.request`) is dialled and reused while the peer's
address stays the same: a peer that restarted (same key, new port) answers nothing on the old
connection until QUIC's idle timeout, so a new address redials at once. Incoming connections are accepted with
`Endpoint.accept_next()` (no Python callbacks), so iroh never calls back into Python from its own
threads.

A node id is known only once the QUIC handshake completed: the costly part (key exchange, signatures, a task
per connection). So handshakes are admitted by address first, before any of that: a few at once from
addresses no member advertised, and a few of those per IP; beyond that a stranger is refused (one stateless
packet). A connection from a member's advertised address (`Allowlist.addresses`) has a pool of its own once
a QUIC retry proved it owns that address, so a flood of strangers' handshakes never crowds out a member. The bindings still keep one process-wide event loop (`uniffi_set_event_loop`): it is bound
to the running loop while any endpoint is open, and starting an endpoint from a second, running loop
is refused (iroh allows one asyncio loop per process at a time).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
from dataclasses import dataclass

from iroh import (
    Endpoint,
    EndpointAddr,
    EndpointId,
    EndpointOptions,
    IrohError,
    RelayMode,
    iroh_ffi,
    preset_minimal,
)

from . import iroh_fix  # noqa: F401  (applies the send-path fix before any data is sent)
from .allowlist import Allowlist
from .identity import NodeId, NodeKey
from .transport import (
    MAX_LANES,
    MAX_PROTOCOL_NAME,
    READ_CHUNK,
    PeerAddress,
    PeerRejected,
    PeerUnreachable,
    RemoteError,
    RequestRejected,
    Status,
    StreamBroken,
    Transport,
)

log = logging.getLogger(__name__)

ALPN = b"cohort/p2p/1"
NOT_ALLOWED_CODE = 403
_NOT_ALLOWED_MARK = f"error_code: {NOT_ALLOWED_CODE}"
_HEADER = struct.Struct(">I")
MAX_ERROR_MESSAGE = 1024
_RESET_HANDLER_FAILED = 1
_STOP_ABANDONED = 2
MAX_DIALLED = 4096  # peers whose last dialled address is kept (to notice one that moved)
# replies that yield to the rest of their connection (ReplyWriter.background)
BACKGROUND_PRIORITY = -1
# handshakes in flight at once (measured with one process flooding 2,048 attempts at a time: without a cap a
# member's fetches timed out for as long as the flood lasted)
MAX_HANDSHAKES = 16  # from addresses no member advertised
MAX_HANDSHAKES_PER_IP = 4  # of those, from one IP: one machine cannot take them all
MAX_MEMBER_HANDSHAKES = 64  # from members' advertised addresses, proven by a retry


def _per_ip_cap(ip: str) -> int:
    """Stranger handshakes one IP may hold at once. Loopback is every process of this machine (members of a
    local run, tests): an IP says nothing of who is behind it there, so only the overall cap holds."""
    try:
        loopback = ipaddress.ip_address(ip.strip("[]")).is_loopback
    except ValueError:  # "relay"
        loopback = False
    return MAX_HANDSHAKES if loopback else MAX_HANDSHAKES_PER_IP


@dataclass(frozen=True)
class IrohConfig:
    """Where to listen and which relays to use (none by default: direct addresses only)."""

    bind_host: str = "127.0.0.1"
    port: int = 0
    relay_urls: tuple[str, ...] = ()
    default_relays: bool = False
    handshake_timeout: float = 10.0
    request_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if isinstance(self.relay_urls, str):
            raise TypeError("relay_urls is a tuple of URLs, not one string")
        for url in self.relay_urls:
            if not url.startswith(("https://", "http://")):
                raise ValueError(f"relay URL must start with https:// or http://, got {url!r}")
        if self.relay_urls and self.default_relays:
            raise ValueError("give custom relay_urls or default_relays, not both")
        if self.handshake_timeout <= 0 or self.request_timeout <= 0:
            raise ValueError("timeouts must be positive")

    def relay_mode(self) -> RelayMode:
        if self.relay_urls:
            return RelayMode.custom_from_urls(list(self.relay_urls))
        if self.default_relays:
            return RelayMode.default_mode()
        return RelayMode.disabled()

    def bind_addr(self) -> str:
        host = f"[{self.bind_host}]" if ":" in self.bind_host else self.bind_host
        return f"{host}:{self.port}"


def describe(error: IrohError) -> str:
    """`str(IrohError)` is empty; this gives kind and message."""
    try:
        return f"{error.kind().name}: {error.message()}"
    except Exception:
        return repr(error)


class IrohTransport(Transport):
    def __init__(
        self, key: NodeKey, allowlist: Allowlist, config: IrohConfig | None = None
    ) -> None:
        super().__init__(key, allowlist)
        self.config = config or IrohConfig()
        self._endpoint: Endpoint | None = None
        self._accept_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        # (peer, lane) -> a connection and the address it was dialled at
        self._outgoing: dict[tuple[NodeId, int], tuple[object, PeerAddress]] = {}
        self._incoming: set[object] = set()
        self._dial_locks: dict[tuple[NodeId, int], asyncio.Lock] = {}
        self._dialled: dict[NodeId, PeerAddress] = {}  # the address each peer was last dialled at
        self._max_frame = 0
        self._handshaking: dict[
            str, int
        ] = {}  # handshakes in flight by IP (from non-member addresses)
        self._strangers = 0  # handshakes in flight from non-member addresses
        self._members = 0  # handshakes in flight in the members' pool

    @property
    def address(self) -> PeerAddress:
        if self._endpoint is None:
            raise RuntimeError("transport not started")
        addr = self._endpoint.addr()
        return PeerAddress(self.node_id, tuple(addr.direct_addresses()), addr.relay_url())

    async def start(self) -> None:
        if self._endpoint is not None:
            raise RuntimeError("transport already started")
        _bind_event_loop()
        try:
            self._endpoint = await Endpoint.bind(
                EndpointOptions(
                    preset=preset_minimal(),
                    relay_mode=self.config.relay_mode(),
                    bind_addr=self.config.bind_addr(),
                    secret_key=self.key.secret,
                    alpns=[ALPN],
                )
            )
        except IrohError as e:
            _unbind_event_loop()
            raise OSError(
                f"cannot bind iroh endpoint on {self.config.bind_addr()}: {describe(e)}"
            ) from e
        self._max_frame = (
            1
            + MAX_PROTOCOL_NAME
            + _HEADER.size
            + max((spec.max_request for spec in self._protocols.values()), default=0)
        )
        self._accept_task = asyncio.create_task(self._accept_loop(), name="iroh-accept")

    async def close(self) -> None:
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is None:
            return
        for conn in [*(c for c, _ in self._outgoing.values()), *self._incoming]:
            _close_quietly(conn, 0, b"shutdown")
        self._outgoing.clear()
        self._incoming.clear()
        try:
            async with asyncio.timeout(5):
                await endpoint.close()
        except (IrohError, TimeoutError) as e:
            log.warning("iroh endpoint close: %s", e)
        tasks = [t for t in [self._accept_task, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        _unbind_event_loop()

    async def disconnect(self, node_id: NodeId) -> None:
        self._drop(node_id, b"stalled")

    def liveness(self, node_id: NodeId) -> dict[int, int]:
        """UDP datagrams received so far on each lane's connection to `node_id`."""
        return {lane: _received(conn) for lane, conn in self._lanes(node_id)}

    async def stalled(self, node_id: NodeId, mark: object) -> None:
        """Drops the connections to `node_id` that received nothing since `mark`: QUIC acknowledges what
        we sent it within an RTT when the peer's stack is alive, however slow its process is to answer
        (measured with 64 clients on 2 cores: dropping live connections on every slow answer had clients
        redial their peers over and over, accepting connections took most of a client's CPU, and fetches
        timed out by the thousand)."""
        before = mark if isinstance(mark, dict) else {}
        self._drop(node_id, b"stalled", lambda lane, conn: _received(conn) <= before.get(lane, 0))

    def _lanes(self, node_id: NodeId) -> list[tuple[int, object]]:
        """(lane, connection) of each connection we keep to `node_id` (a few lookups, not a scan: this
        runs for every request)."""
        return [
            (lane, c[0]) for lane in range(MAX_LANES) if (c := self._outgoing.get((node_id, lane)))
        ]

    def _drop(self, node_id: NodeId, reason: bytes, silent=lambda lane, conn: True) -> None:
        """Close the connections to `node_id` that `silent` picks (all by default)."""
        for lane, conn in self._lanes(node_id):
            if silent(lane, conn):
                del self._outgoing[(node_id, lane)]
                _close_quietly(conn, 0, reason)

    # --- requesting ---------------------------------------------------------------------------

    async def _open(
        self, peer: PeerAddress, protocol: str, body: bytes, lane: int = 0
    ) -> _IrohReply:
        name = protocol.encode()
        frame = bytes([len(name)]) + name + _HEADER.pack(len(body)) + body
        for attempt in (0, 1):
            conn, fresh = await self._connection(peer, lane)
            try:
                bi = await conn.open_bi()
                send, recv = bi.send(), bi.recv()
                await send.write_all(frame)
                await send.finish()
                status_byte = await recv.read_exact(1)
            except IrohError as e:
                text = describe(e)
                if "Reset(" in text:  # the handler cut its own stream; the connection is fine
                    raise StreamBroken(f"{peer.node_id!r} reset the reply: {text}") from e
                self._forget((peer.node_id, lane), conn)
                if _NOT_ALLOWED_MARK in text:
                    raise PeerRejected(f"{peer.node_id!r} refused us: not on its allowlist") from e
                if fresh or attempt == 1:
                    raise PeerUnreachable(f"{peer.node_id!r}: {text}") from e
                continue  # a cached connection went stale (peer restarted): redial once
            status = _status(status_byte[0])
            if status != Status.OK:
                try:
                    message = (await recv.read_to_end(MAX_ERROR_MESSAGE)).decode(errors="replace")
                except IrohError:
                    message = ""
                raise RemoteError(status, message)
            return _IrohReply(recv)
        raise AssertionError("unreachable")

    async def _connection(self, peer: PeerAddress, lane: int):
        if self._endpoint is None:
            raise RuntimeError("transport not started")
        key = (peer.node_id, lane)
        last = self._dialled.get(peer.node_id)
        if last is not None and peer.addrs and not set(last.addrs) & set(peer.addrs):
            self._moved(
                peer
            )  # no address in common: a restart elsewhere, not an address added or dropped
        if len(self._dialled) >= MAX_DIALLED and peer.node_id not in self._dialled:
            self._dialled.clear()  # bounded: only peers dialled again soon matter
        self._dialled[peer.node_id] = peer
        conn = self._reusable(key, peer)
        if conn is not None:
            return conn, False
        lock = self._dial_locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._reusable(key, peer)
            if conn is not None:
                return conn, False
            addr = EndpointAddr(
                EndpointId.from_bytes(peer.node_id.key), peer.relay_url, list(peer.addrs)
            )
            try:
                conn = await self._endpoint.connect(addr, ALPN)
            except IrohError as e:
                raise PeerUnreachable(f"cannot connect to {peer.node_id!r}: {describe(e)}") from e
            self._outgoing[key] = (conn, peer)
            self.stats.dials += 1
            return conn, True

    def _moved(self, peer: PeerAddress) -> None:
        """`peer` came back at a new address (restarted with its key): close every connection with that
        node id, so the next dial starts clean. While connections to the dead instance wait out QUIC's idle
        timeout (30 s), iroh does not get a new connection to the same node through, even to its new
        address and even with the new instance's own connections to us open (measured on loopback: no
        dial to a restarted peer got through for 12 s; closing only the old instance's connections did
        not help, closing all did: the next dial took milliseconds). The new instance redials us."""
        self._drop(peer.node_id, b"moved")
        for conn in list(self._incoming):
            if conn.remote_id().to_bytes() == peer.node_id.key:
                _close_quietly(conn, 0, b"moved")

    def _reusable(self, key: tuple[NodeId, int], peer: PeerAddress):
        """The cached connection of `key`, unless it closed or was dialled at another address (one the peer
        dropped; a peer that moved had its connections closed by `_moved`)."""
        cached = self._outgoing.get(key)
        if cached is None:
            return None
        conn, dialled = cached
        if conn.close_reason() is None and dialled == peer:
            return conn
        del self._outgoing[key]
        return None

    def _forget(self, key: tuple[NodeId, int], conn) -> None:
        if self._outgoing.get(key, (None,))[0] is conn:
            del self._outgoing[key]
        _close_quietly(conn, 0, b"error")

    # --- serving ------------------------------------------------------------------------------

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(self) -> None:
        endpoint = self._endpoint
        while endpoint is not None and not endpoint.is_closed():
            try:
                incoming = await endpoint.accept_next()
            except IrohError as e:
                log.debug("accept_next: %s", describe(e))
                await asyncio.sleep(0.01)
                continue
            if incoming is None:
                return
            try:
                pool = await self._admit(incoming)
            except IrohError as e:
                log.debug("admitting a connection: %s", describe(e))
                continue
            if pool is not None:
                self._spawn(self._serve_connection(incoming, pool), "iroh-conn")

    async def _admit(self, incoming) -> str | None:
        """The pool of handshakes an incoming connection joins: its IP (non-member addresses), "" (the
        members' pool), or None: refused, or asked to prove its address by a retry (stateless)."""
        remote = await incoming.remote_addr()
        addr = remote.addr if remote.is_ip() else ""
        ip = addr.rpartition(":")[0] if addr else "relay"
        if self._strangers < MAX_HANDSHAKES and self._handshaking.get(ip, 0) < _per_ip_cap(ip):
            self._strangers += 1
            self._handshaking[ip] = self._handshaking.get(ip, 0) + 1
            return ip
        extra = self.stats.extra
        if addr in self.allowlist.addresses and self._members < MAX_MEMBER_HANDSHAKES:
            if await incoming.remote_addr_validated():
                self._members += 1
                return ""
            await (
                incoming.retry()
            )  # the member's next attempt carries a token: its address is its own
            extra["handshake_retries"] = extra.get("handshake_retries", 0) + 1
            return None
        await incoming.refuse()
        extra["handshakes_refused"] = extra.get("handshakes_refused", 0) + 1
        return None

    def _admitted(self, pool: str) -> None:
        """A handshake of `pool` is over (done, failed or timed out): its place is free."""
        if not pool:
            self._members -= 1
            return
        self._strangers -= 1
        left = self._handshaking.pop(pool) - 1
        if left:
            self._handshaking[pool] = left

    async def _serve_connection(self, incoming, pool: str) -> None:
        try:
            async with asyncio.timeout(self.config.handshake_timeout):
                accepting = await incoming.accept()
                conn = await accepting.connect()
        except (IrohError, TimeoutError) as e:
            log.debug("handshake failed: %s", e)
            return
        finally:
            self._admitted(pool)
        peer = NodeId(conn.remote_id().to_bytes())
        if not self.allowlist.allows(peer):
            self.stats.requests_refused += 1
            _close_quietly(conn, NOT_ALLOWED_CODE, b"node not in allowlist")
            return
        self._incoming.add(conn)
        try:
            while True:
                try:
                    bi = await conn.accept_bi()
                except IrohError:
                    return
                if not self.allowlist.allows(
                    peer
                ):  # the client list changed under an open connection
                    self.stats.requests_refused += 1
                    _close_quietly(conn, NOT_ALLOWED_CODE, b"node not in allowlist")
                    return
                self._spawn(self._serve_stream(peer, bi), "iroh-stream")
        finally:
            self._incoming.discard(conn)

    async def _serve_stream(self, peer: NodeId, bi) -> None:
        send, recv = bi.send(), bi.recv()
        try:
            await self._answer(peer, send, recv)
        except IrohError as e:  # the requester went away; only this stream is affected
            log.debug("stream from %r: %s", peer, describe(e))

    async def _answer(self, peer: NodeId, send, recv) -> None:
        try:
            async with asyncio.timeout(self.config.request_timeout):
                frame = await recv.read_to_end(self._max_frame)
        except TimeoutError:
            await _reject(send, Status.BAD_REQUEST, "request not finished in time")
            return
        except IrohError as e:
            if "TooLong" in describe(e):
                await recv.stop(_STOP_ABANDONED)
                await _reject(send, Status.TOO_LARGE, f"request frame over {self._max_frame} bytes")
            return
        try:
            protocol, body = _parse_request(frame)
        except ValueError as e:
            await _reject(send, Status.BAD_REQUEST, str(e))
            return
        spec = self._spec(protocol)
        if spec is None:
            await _reject(send, Status.UNKNOWN_PROTOCOL, f"no protocol {protocol!r}")
            return
        if len(body) > spec.max_request:
            await _reject(
                send, Status.TOO_LARGE, f"{protocol} requests are at most {spec.max_request} bytes"
            )
            return
        self.stats.requests_served += 1
        writer = _IrohReplyWriter(send)
        try:
            await spec.handler(peer, body, writer)
        except RequestRejected as e:
            if writer.started:
                await send.reset(_RESET_HANDLER_FAILED)
            else:
                await _reject(send, e.status, e.message)
            return
        except IrohError:
            raise
        except Exception:
            log.exception("handler %s failed", protocol)
            if writer.started:
                await send.reset(_RESET_HANDLER_FAILED)
            else:
                await _reject(send, Status.INTERNAL, "handler failed")
            return
        if not writer.started:
            await send.write_all(bytes([Status.OK]))
        await send.finish()


class _IrohReplyWriter:
    def __init__(self, send) -> None:
        self._send = send
        self.started = False

    async def background(self) -> None:
        try:  # QUIC sends a connection's higher-priority streams first (default 0)
            await self._send.set_priority(BACKGROUND_PRIORITY)
        except IrohError:
            pass  # the stream is gone: the write says so

    async def write(self, data: bytes) -> None:
        if not self.started:  # the status goes with the first bytes: one call into iroh, not two
            self.started = True
            data = bytes([Status.OK]) + data
        if data:
            await self._send.write_all(data)


class _IrohReply:
    def __init__(self, recv) -> None:
        self._recv = recv
        self._ended = False
        self._broken = False

    async def read(self, max_bytes: int = READ_CHUNK) -> bytes:
        if self._ended:
            return b""
        if self._broken:
            raise StreamBroken("reply already cut")
        try:
            chunk = await self._recv.read(max_bytes)
        except IrohError as e:
            self._broken = True
            raise StreamBroken(describe(e)) from e
        except BaseException:
            self._broken = (
                True  # a cancelled read may have consumed a chunk: the stream is unusable
            )
            raise
        if not chunk:
            self._ended = True
        return chunk

    async def close(self) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            await self._recv.stop(_STOP_ABANDONED)
        except IrohError:
            pass


def _parse_request(frame: bytes) -> tuple[str, bytes]:
    if not frame:
        raise ValueError("empty request")
    name_len = frame[0]
    if not 0 < name_len <= MAX_PROTOCOL_NAME:
        raise ValueError(f"bad protocol name length {name_len}")
    end = 1 + name_len + _HEADER.size
    if len(frame) < end:
        raise ValueError("request shorter than its header")
    try:
        name = frame[1 : 1 + name_len].decode("ascii")
    except UnicodeDecodeError as e:
        raise ValueError("protocol name is not ASCII") from e
    (body_len,) = _HEADER.unpack_from(frame, 1 + name_len)
    if len(frame) - end != body_len:
        raise ValueError(f"body length says {body_len} bytes, frame carries {len(frame) - end}")
    return name, frame[end:]


def _status(code: int) -> Status:
    try:
        return Status(code)
    except ValueError:
        return Status.INTERNAL


async def _reject(send, status: Status, message: str) -> None:
    await send.write_all(bytes([status]) + message.encode()[:MAX_ERROR_MESSAGE])
    await send.finish()


def _received(conn) -> int:
    try:
        return conn.stats().udp_rx_datagrams
    except IrohError:
        return 0


def _close_quietly(conn, code: int, reason: bytes) -> None:
    try:
        conn.close(code, reason)
    except IrohError:
        pass


# --- the bindings' process-wide event loop ----------------------------------------------------

_loop_users = 0


def _bind_event_loop() -> None:
    global _loop_users
    loop = asyncio.get_running_loop()
    bound = iroh_ffi._UNIFFI_GLOBAL_EVENT_LOOP
    if bound is not None and bound is not loop:
        if bound.is_closed() or not bound.is_running():
            _loop_users = 0  # left behind by endpoints that were never closed on a finished loop
        else:
            raise RuntimeError(
                "iroh is already in use from another running event loop; "
                "the bindings support one asyncio loop per process at a time"
            )
    iroh_ffi.uniffi_set_event_loop(loop)
    _loop_users += 1


def _unbind_event_loop() -> None:
    global _loop_users
    _loop_users = max(0, _loop_users - 1)
    if _loop_users == 0:
        iroh_ffi.uniffi_set_event_loop(None)
