"""The aiohttp server: JSON-RPC over HTTP on `port`, pubsub over websockets on `port + 1`.

Both ports serve the same app (web3.js derives the websocket URL as port+1; some clients use one port for
both). Any web page the developer opens can send requests to localhost, so the server trusts no page: a
request that carries an `Origin` (browsers always send one cross-site, for websockets too) is served only
if that origin is configured (the Solana Explorer's by default), which also gets CORS headers and Chrome's
private-network preflight; the `Host` header must name localhost or the bound address, which defeats
DNS rebinding. Clients outside a browser send no Origin and are served as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from aiohttp import WSMsgType, web

from . import jsonio
from .config import LOOPBACK_NAMES, MAX_REQUEST_BYTES, LocalnetConfig, exposure_warning
from .errors import INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RpcError
from .node import Node
from .pubsub import SUBSCRIBE_METHODS, UNSUBSCRIBE_METHODS
from .rpc import Dispatcher, dumps, error_response
from .traffic import Traffic

log = logging.getLogger("cohort.localnet")

WILDCARD_HOSTS = ("0.0.0.0", "::")
WS_QUEUE_LIMIT = 10_000  # notifications buffered per websocket before a slow reader is dropped


def _too_large(size: int | None, cors: dict[str, str]) -> web.Response:
    detail = f" ({size} bytes)" if size is not None else ""
    error = RpcError(
        INVALID_REQUEST,
        f"Invalid request: body too large{detail}; the limit is {MAX_REQUEST_BYTES} bytes",
    )
    return web.Response(
        status=413, body=dumps(error_response(error)), content_type="application/json", headers=cors
    )


def url_host(host: str) -> str:
    """`host` as it goes into a URL or a Host header (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host


def host_name(header: str) -> str:
    """The name part of a Host header: "[::1]:8899" -> "::1", "Localhost:80" -> "localhost"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, sep, port = header.rpartition(":")
    return name if sep and port.isdigit() else header


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class RequestGuard:
    """Which requests a localnet serves, judged from their Origin and Host headers alone."""

    def __init__(self, config: LocalnetConfig) -> None:
        self.origins = frozenset(config.cors_origins)
        self.any_origin = "*" in self.origins
        self.any_host = config.host in WILDCARD_HOSTS  # its names are unknown: warned at start
        self.hosts = frozenset({*LOOPBACK_NAMES, config.host.lower()})

    def refusal(self, request: web.BaseRequest) -> str | None:
        """Why `request` is refused, or None to serve it."""
        host = request.headers.get("Host")
        if host is not None and not self.any_host and host_name(host) not in self.hosts:
            return f"Host {host[:100]!r} is not this localnet (use localhost or the bound address)"
        origin = request.headers.get("Origin")
        if origin is not None and not self.allows_origin(origin):
            return (
                f"origin {origin[:100]!r} may not use this localnet"
                " (start it with --cors-origin ORIGIN to allow a web app)"
            )
        return None

    def allows_origin(self, origin: str) -> bool:
        return self.any_origin or origin.rstrip("/") in self.origins

    def cors(self, request: web.BaseRequest) -> dict[str, str]:
        """CORS response headers for an allowed origin (none without an Origin)."""
        origin = request.headers.get("Origin")
        if origin is None:
            return {}
        return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


class _WsConnection:
    """One websocket's outgoing side: a bounded queue drained by a writer task."""

    def __init__(self, ws: web.WebSocketResponse, traffic: Traffic | None = None) -> None:
        self.ws = ws
        self.traffic = traffic
        self.queue: asyncio.Queue[str] = asyncio.Queue(WS_QUEUE_LIMIT)
        self.writer = asyncio.get_running_loop().create_task(self._write())

    def send(self, text: str) -> None:
        if self.traffic is not None:
            self.traffic.notifications += 1
            self.traffic.bytes_out += len(text)
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:
            log.warning("websocket client too slow: %d queued messages; closing it", WS_QUEUE_LIMIT)
            self.writer.cancel()
            asyncio.get_running_loop().create_task(self.ws.close(message=b"too slow"))

    async def _write(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while True:
                await self.ws.send_str(await self.queue.get())


def _free_port_pair(host: str, attempts: int = 50) -> tuple[socket.socket, socket.socket]:
    """Two listening sockets on adjacent ports, the first chosen by the OS."""
    for _ in range(attempts):
        http = socket.socket(_family(host), socket.SOCK_STREAM)
        http.bind((host, 0))
        port = http.getsockname()[1]
        if port >= 65535:
            http.close()
            continue
        ws = socket.socket(_family(host), socket.SOCK_STREAM)
        try:
            ws.bind((host, port + 1))
        except OSError:
            http.close()
            ws.close()
            continue
        return http, ws
    raise OSError(f"no two adjacent free ports on {host} after {attempts} attempts")


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port P with P and P+1 free right now (for starting a localnet in another process)."""
    http, ws = _free_port_pair(host)
    port = http.getsockname()[1]
    http.close()
    ws.close()
    return port


def _bound(host: str, port: int) -> socket.socket:
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


class Localnet:
    """A running localnet. `async with Localnet(LocalnetConfig(port=0)) as net: net.http_url ...`"""

    def __init__(self, config: LocalnetConfig | None = None) -> None:
        self.config = config or LocalnetConfig()
        self.node: Node | None = None
        self.port = 0
        self._server: web.Server | None = None
        self._listeners: list[asyncio.Server] = []
        self._ticker: asyncio.Task[None] | None = None
        self._dispatcher: Dispatcher | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self.guard = RequestGuard(self.config)

    @property
    def http_url(self) -> str:
        return f"http://{url_host(self.config.host)}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{url_host(self.config.host)}:{self.port + 1}"

    async def start(self) -> None:
        config = self.config
        warning = exposure_warning(config)
        if warning is not None:
            log.warning(warning)
        self.node = Node.open(
            config.slot_ms,
            config.ledger,
            wipe=config.reset,
            max_history=config.max_history,
            max_subscriptions=config.max_subscriptions,
        )
        self._dispatcher = Dispatcher(self.node, cheats=config.cheats)
        if config.port == 0:
            socks = _free_port_pair(config.host)
        else:
            first = _bound(config.host, config.port)
            try:
                socks = (first, _bound(config.host, config.port + 1))
            except OSError:
                first.close()
                raise
        self.port = socks[0].getsockname()[1]
        self.node.rpc_address = f"{url_host(config.host)}:{self.port}"
        # aiohttp's low-level server: one handler, no router or middleware on the hot path
        self._server = web.Server(self._handle, auto_decompress=False, access_log=None)
        loop = asyncio.get_running_loop()
        for sock in socks:
            sock.listen(1024)
            self._listeners.append(await loop.create_server(self._server, sock=sock))
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        assert self.node is not None
        period = self.config.slot_ms / 1000
        while True:
            await asyncio.sleep(period)
            try:
                self.node.sync()
            except Exception:
                log.exception("slot tick failed")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for ws in list(self._sockets):
            await ws.close()
        for listener in self._listeners:
            listener.close()
        if self._server is not None:
            await self._server.shutdown(0.5)
        for listener in self._listeners:
            await listener.wait_closed()
        self._listeners.clear()
        if self.node is not None:
            await self.node.close()
        self._server = self._ticker = None

    async def __aenter__(self) -> Localnet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- HTTP ----------------------------------------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        refusal = self.guard.refusal(request)
        if refusal is not None:  # refused before anything runs: a "simple" POST needs no preflight
            return web.Response(status=403, text=refusal, headers={"Vary": "Origin"})
        cors = self.guard.cors(request)
        if request.method == "POST":
            return await self._rpc(request, cors)
        if request.method == "OPTIONS":
            return self._preflight(request, cors)
        if request.method == "GET" and request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._websocket(request)
        if request.method == "GET" and request.path == "/health":
            return web.Response(text="ok", headers=cors)
        return web.Response(
            status=405, text="POST JSON-RPC requests, or open a websocket", headers=cors
        )

    @staticmethod
    def _preflight(request: web.BaseRequest, cors: dict[str, str]) -> web.Response:
        headers = {
            **cors,
            "Access-Control-Allow-Methods": "POST, GET, OPTIONS",
            "Access-Control-Allow-Headers": request.headers.get(
                "Access-Control-Request-Headers", "*"
            ),
            "Access-Control-Allow-Private-Network": "true",
            "Access-Control-Max-Age": "86400",
        }
        return web.Response(status=204, headers=headers)

    async def _rpc(self, request: web.BaseRequest, cors: dict[str, str]) -> web.Response:
        assert self._dispatcher is not None
        if request.content_length is not None and request.content_length > MAX_REQUEST_BYTES:
            return _too_large(request.content_length, cors)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(None, cors)
        response = await self._dispatcher.handle_body(body)
        traffic = self.node.traffic
        traffic.requests += (
            1 if not body.lstrip().startswith(b"[") else max(body.count(b'"method"'), 1)
        )
        traffic.bytes_in += len(body)
        traffic.bytes_out += len(response)
        return web.Response(body=response, content_type="application/json", headers=cors)

    # --- websocket pubsub --------------------------------------------------------------------------------------
    async def _websocket(self, request: web.BaseRequest) -> web.WebSocketResponse:
        assert self.node is not None
        ws = web.WebSocketResponse(max_msg_size=MAX_REQUEST_BYTES, heartbeat=30)
        await ws.prepare(request)
        self._sockets.append(ws)
        connection = _WsConnection(ws, self.node.traffic)
        pubsub = self.node.pubsub
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self.node.sync()
                    connection.send(self._ws_request(msg.data, connection))
                elif msg.type == WSMsgType.BINARY:
                    connection.send(
                        jsonio.dumps_text(error_response(RpcError(PARSE_ERROR, "Parse error")))
                    )
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            pubsub.drop_connection(connection)
            # let queued replies go out before the writer stops
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drain(connection), 0.5)
            connection.writer.cancel()
            self._sockets.remove(ws)
        return ws

    @staticmethod
    async def _drain(connection: _WsConnection) -> None:
        while not connection.queue.empty() and not connection.ws.closed:
            await asyncio.sleep(0.01)

    def _ws_request(self, text: str, connection: _WsConnection) -> str:
        assert self.node is not None
        try:
            request = jsonio.loads(text)
        except ValueError:
            return jsonio.dumps_text(error_response(RpcError(PARSE_ERROR, "Parse error")))
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return jsonio.dumps_text(error_response(RpcError(INVALID_REQUEST, "Invalid request")))
        request_id: Any = request.get("id")
        method = request["method"]
        pubsub = self.node.pubsub
        try:
            if method in SUBSCRIBE_METHODS:
                result: Any = pubsub.subscribe(method, request.get("params"), connection)
            elif method in UNSUBSCRIBE_METHODS:
                result = pubsub.unsubscribe(method, request.get("params"), connection)
            else:
                raise RpcError(METHOD_NOT_FOUND, "Method not found")
        except RpcError as exc:
            return jsonio.dumps_text(error_response(exc, request_id))
        return jsonio.dumps_text({"jsonrpc": "2.0", "result": result, "id": request_id})
