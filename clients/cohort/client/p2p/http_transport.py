"""Transport over plain HTTP/1.1 (aiohttp), for tests and hosts with public addresses.

    POST /cohort/p2p/<protocol>     body = request body
    200 + body (chunked)            or  4xx/5xx + message, with the status in `X-Cohort-Status`

HTTP carries no peer identity, so each request is signed by the requester's node key over
(requester, responder, protocol, time, sha256(body)); the responder checks the signature, the time
(within `max_clock_skew`) and its allowlist. Replies are not signed: everything fetched is verified
by content (blob hashes, signed announcements). Traffic is not encrypted and a captured request can
be replayed to the same node within the skew window; use iroh where that matters.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import struct
import time

import aiohttp
from aiohttp import web

from .allowlist import Allowlist
from .identity import SIGNATURE_BYTES, NodeId, NodeKey
from .transport import (
    READ_CHUNK,
    PeerAddress,
    PeerRejected,
    PeerUnreachable,
    RemoteError,
    RequestRejected,
    Status,
    StreamBroken,
    Transport,
    check_protocol_name,
)

log = logging.getLogger(__name__)

PATH_PREFIX = "/cohort/p2p/"
H_FROM = "X-Cohort-From"
H_TIME = "X-Cohort-Time"
H_SIGNATURE = "X-Cohort-Signature"
H_STATUS = "X-Cohort-Status"
H_REFUSED = "X-Cohort-Refused"  # set when the transport itself refused the requester
MAX_ERROR_MESSAGE = 1024
_SIGNING_TAG = b"cohort/http-request/v1"
_HTTP_CODES = {
    Status.BAD_REQUEST: 400,
    Status.FORBIDDEN: 403,
    Status.NOT_FOUND: 404,
    Status.UNKNOWN_PROTOCOL: 404,
    Status.TOO_LARGE: 413,
    Status.INTERNAL: 500,
    Status.BUSY: 503,
}


def signed_request_bytes(
    requester: NodeId, responder: NodeId, protocol: str, millis: int, body: bytes
) -> bytes:
    name = protocol.encode()
    return (
        _SIGNING_TAG
        + requester.key
        + responder.key
        + bytes([len(name)])
        + name
        + struct.pack(">Q", millis)
        + hashlib.sha256(body).digest()
    )


class HttpTransport(Transport):
    def __init__(
        self,
        key: NodeKey,
        allowlist: Allowlist,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_clock_skew: float = 120.0,
        request_timeout: float = 10.0,
    ) -> None:
        super().__init__(key, allowlist)
        if not 0 <= port < 65536:
            raise ValueError(f"port must be 0..65535, got {port}")
        if max_clock_skew <= 0 or request_timeout <= 0:
            raise ValueError("max_clock_skew and request_timeout must be positive")
        self.host = host
        self.port = port
        self.max_clock_skew = max_clock_skew
        self.request_timeout = request_timeout
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._bound: tuple[str, int] | None = None

    @property
    def address(self) -> PeerAddress:
        if self._bound is None:
            raise RuntimeError("transport not started")
        host, port = self._bound
        host = f"[{host}]" if ":" in host else host
        return PeerAddress(self.node_id, (f"{host}:{port}",))

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("transport already started")
        app = web.Application()
        app.router.add_post(PATH_PREFIX + "{protocol:.+}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            await runner.cleanup()
            raise OSError(f"cannot bind HTTP transport on {self.host}:{self.port}: {e}") from e
        await web.SockSite(runner, sock).start()
        self._runner = runner
        self._bound = sock.getsockname()[:2]
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=32),
            auto_decompress=False,
            read_bufsize=READ_CHUNK,
        )

    async def close(self) -> None:
        session, self._session = self._session, None
        runner, self._runner = self._runner, None
        if session is not None:
            await session.close()
        if runner is not None:
            await runner.cleanup()

    async def disconnect(self, node_id: NodeId) -> None:
        """Nothing to drop: a stalled reply closes its own TCP connection."""

    # --- requesting ---------------------------------------------------------------------------

    async def _open(
        self, peer: PeerAddress, protocol: str, body: bytes, lane: int = 0
    ) -> _HttpReply:
        # lanes need nothing here: each request that runs beside another has a TCP connection of its own
        if self._session is None:
            raise RuntimeError("transport not started")
        if not peer.addrs:
            raise PeerUnreachable(f"{peer.node_id!r} has no direct address (HTTP needs one)")
        millis = int(time.time() * 1000)
        signature = self.key.sign(
            signed_request_bytes(self.node_id, peer.node_id, protocol, millis, body)
        )
        headers = {
            H_FROM: self.node_id.hex(),
            H_TIME: str(millis),
            H_SIGNATURE: signature.hex(),
            "Content-Type": "application/octet-stream",
        }
        failures = []
        for addr in peer.addrs:
            try:
                resp = await self._session.post(
                    f"http://{addr}{PATH_PREFIX}{protocol}", data=body, headers=headers
                )
            except (aiohttp.ClientConnectionError, OSError) as e:
                failures.append(f"{addr}: {e}")
                continue
            if resp.status == 200:
                return _HttpReply(resp)
            try:
                message = (await resp.content.read(MAX_ERROR_MESSAGE)).decode(errors="replace")
            except aiohttp.ClientError:
                message = ""
            resp.close()
            if H_REFUSED in resp.headers:
                raise PeerRejected(f"{peer.node_id!r} refused us: {message}")
            raise RemoteError(_status_of(resp), message)
        raise PeerUnreachable(f"cannot connect to {peer.node_id!r}: {'; '.join(failures)}")

    # --- serving ------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        protocol = request.match_info["protocol"]
        try:
            check_protocol_name(protocol)
        except ValueError as e:
            return _error(Status.BAD_REQUEST, str(e))
        spec = self._spec(protocol)
        if spec is None:
            return _error(Status.UNKNOWN_PROTOCOL, f"no protocol {protocol!r}")
        try:
            requester, millis, signature = _parse_auth(request)
        except ValueError as e:
            return _error(Status.BAD_REQUEST, str(e))
        if not self.allowlist.allows(requester):
            self.stats.requests_refused += 1
            return _refuse("node not in allowlist")
        if abs(time.time() * 1000 - millis) > self.max_clock_skew * 1000:
            return _refuse("request time outside the allowed clock skew")
        if request.content_length is not None and request.content_length > spec.max_request:
            return _error(
                Status.TOO_LARGE, f"{protocol} requests are at most {spec.max_request} bytes"
            )
        try:
            async with asyncio.timeout(self.request_timeout):
                body = await _read_limited(request, spec.max_request)
        except TimeoutError:
            return _error(Status.BAD_REQUEST, "request not finished in time")
        if body is None:
            return _error(
                Status.TOO_LARGE, f"{protocol} requests are at most {spec.max_request} bytes"
            )
        signed = signed_request_bytes(requester, self.node_id, protocol, millis, body)
        if not requester.verify(signed, signature):
            self.stats.requests_refused += 1
            return _refuse("bad request signature")
        self.stats.requests_served += 1
        writer = _HttpReplyWriter(request)
        try:
            await spec.handler(requester, body, writer)
        except RequestRejected as e:
            if writer.response is None:
                return _error(e.status, e.message)
            return writer.cut()
        except ConnectionError:
            return writer.cut()
        except Exception:
            log.exception("handler %s failed", protocol)
            if writer.response is None:
                return _error(Status.INTERNAL, "handler failed")
            return writer.cut()
        if writer.response is None:
            await writer.write(b"")
        await writer.response.write_eof()
        return writer.response


class _HttpReplyWriter:
    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None

    async def write(self, data: bytes) -> None:
        if self.response is None:
            self.response = web.StreamResponse(
                status=200,
                headers={H_STATUS: str(int(Status.OK)), "Content-Type": "application/octet-stream"},
            )
            self.response.enable_chunked_encoding()
            await self.response.prepare(self._request)
        if data:
            await self.response.write(data)

    async def background(self) -> None:
        pass  # one reply per HTTP request: nothing to order it against

    def cut(self) -> web.StreamResponse:
        """Drop the connection mid-reply: the requester's chunked decoder reports it as incomplete."""
        transport = self._request.transport
        if transport is not None:
            transport.abort()
        assert self.response is not None
        return self.response


class _HttpReply:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._ended = False

    async def read(self, max_bytes: int = READ_CHUNK) -> bytes:
        if self._ended:
            return b""
        try:
            chunk = await self._response.content.read(max_bytes)
        except (aiohttp.ClientError, ConnectionError) as e:
            raise StreamBroken(f"reply cut: {e!r}") from e
        if not chunk:
            self._ended = True
        return chunk

    async def close(self) -> None:
        if self._ended:
            self._response.release()
        else:
            self._ended = True
            self._response.close()


def _parse_auth(request: web.Request) -> tuple[NodeId, int, bytes]:
    try:
        requester = NodeId.from_hex(request.headers[H_FROM])
        millis = int(request.headers[H_TIME])
        signature = bytes.fromhex(request.headers[H_SIGNATURE])
    except KeyError as e:
        raise ValueError(f"missing header {e.args[0]}") from e
    except ValueError as e:
        raise ValueError(f"malformed authentication header: {e}") from e
    if len(signature) != SIGNATURE_BYTES or millis < 0:
        raise ValueError("malformed authentication header")
    return requester, millis, signature


async def _read_limited(request: web.Request, limit: int) -> bytes | None:
    """The request body, or None if it is longer than `limit`."""
    body = bytearray()
    while True:
        chunk = await request.content.read(limit + 1 - len(body))
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > limit:
            return None


def _error(status: Status, message: str) -> web.Response:
    return web.Response(
        status=_HTTP_CODES[status],
        text=message[:MAX_ERROR_MESSAGE],
        headers={H_STATUS: str(int(status))},
    )


def _refuse(message: str) -> web.Response:
    """The requester is not let in (allowlist, signature): PeerRejected on its side."""
    response = _error(Status.FORBIDDEN, message)
    response.headers[H_REFUSED] = "1"
    return response


def _status_of(resp: aiohttp.ClientResponse) -> Status:
    try:
        return Status(int(resp.headers.get(H_STATUS, "")))
    except ValueError:
        return {
            400: Status.BAD_REQUEST,
            403: Status.FORBIDDEN,
            404: Status.NOT_FOUND,
            413: Status.TOO_LARGE,
        }.get(resp.status, Status.INTERNAL)
