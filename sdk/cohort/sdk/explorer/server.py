"""The explorer's HTTP server (aiohttp): the JSON API, a server-sent event stream that tells open pages
what changed, and the pages themselves: static HTML, our own JS and CSS, no third-party code and no CDN.

Pages never put data into HTML: the JS builds the DOM with textContent, so run names and descriptions stay
text. A strict Content-Security-Policy (scripts only from this server, no inline script) backs that up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from . import api
from .indexer import IndexerStatus
from .store import Store

log = logging.getLogger("cohort.sdk.explorer")

STATIC = Path(__file__).parent / "static"
_ASSETS = {  # the only files served: no path from the request ever reaches the file system
    "explorer.js": "text/javascript",
    "chart.js": "text/javascript",
    "style.css": "text/css",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
MAX_STREAMS = 64  # open event streams at once
KEEPALIVE = 15.0


class ChangeFeed:
    """Fan-out of "these runs changed" to every open event stream (bounded queues: a slow page misses
    nothing that matters, the next message tells it to refresh anyway)."""

    def __init__(self) -> None:
        self.seq = 0
        self._queues: set[asyncio.Queue[dict[str, Any]]] = set()

    def publish(self, runs: set[str]) -> None:
        self.seq += 1
        message = {"seq": self.seq, "runs": sorted(runs)}
        for q in self._queues:
            if q.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
            q.put_nowait(message)

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=16)
        self._queues.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any]]) -> None:
        self._queues.discard(q)

    @property
    def listeners(self) -> int:
        return len(self._queues)


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(body, allow_nan=False),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _guard(allowed_hosts: frozenset[str] | None):
    """Security headers on every answer; JSON errors under /api/; and, when serving loopback only, the
    Host header must name this machine (a DNS-rebinding page cannot read the API)."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        host = (request.host or "").lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if allowed_hosts is not None and name not in allowed_hosts:
            return _json({"error": f"unexpected Host header {host[:100]!r}"}, 421)
        try:
            response = await handler(request)
        except web.HTTPException as e:
            if not request.path.startswith("/api/"):
                raise
            response = _json({"error": e.reason or "error"}, e.status)
        response.headers.setdefault("Content-Security-Policy", _CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response

    return middleware


def make_app(
    store: Store,
    status: Callable[[], IndexerStatus],
    feed: ChangeFeed,
    cluster_url: str,
    allowed_hosts: frozenset[str] | None = None,
) -> web.Application:
    """The explorer's routes. `allowed_hosts`: Host header names accepted (None: any)."""

    async def answer(build: Callable[[], dict[str, Any]]) -> web.Response:
        try:
            return _json(build())
        except api.NotFound as e:
            return _json({"error": str(e)}, 404)
        except api.BadRequest as e:
            return _json({"error": str(e)}, 400)

    async def runs(request: web.Request) -> web.Response:
        return await answer(lambda: api.runs(store, status()))

    async def run(request: web.Request) -> web.Response:
        key = request.match_info["run"]
        return await answer(lambda: api.run(store, status(), key, cluster_url))

    async def metrics(request: web.Request) -> web.Response:
        key = request.match_info["run"]
        return await answer(lambda: api.metrics(store, status(), key, dict(request.query)))

    async def clients(request: web.Request) -> web.Response:
        key = request.match_info["run"]
        return await answer(lambda: api.clients(store, status(), key))

    async def events(request: web.Request) -> web.Response:
        key = request.match_info["run"]
        return await answer(lambda: api.events(store, status(), key, dict(request.query)))

    async def indexer_status(request: web.Request) -> web.Response:
        return _json({"indexer": api._status(status())})

    async def stream(request: web.Request) -> web.StreamResponse:
        if feed.listeners >= MAX_STREAMS:
            return _json({"error": "too many open event streams"}, 503)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        q = feed.subscribe()
        try:
            await response.write(b"retry: 1000\n\n")
            while True:
                try:
                    message = await asyncio.wait_for(q.get(), KEEPALIVE)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                await response.write(f"event: change\ndata: {json.dumps(message)}\n\n".encode())
        except ConnectionResetError:  # the page went away
            pass
        finally:
            feed.unsubscribe(q)
        return response

    def page(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(request: web.Request) -> web.Response:
            body = (STATIC / name).read_bytes()
            return web.Response(body=body, content_type="text/html", charset="utf-8")

        return serve

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _ASSETS:
            raise web.HTTPNotFound()
        return web.Response(body=(STATIC / name).read_bytes(), content_type=_ASSETS[name],
                            charset="utf-8", headers={"Cache-Control": "no-cache"})  # fmt: skip

    async def api_unknown(request: web.Request) -> web.Response:
        return _json({"error": f"no API endpoint {request.path[:100]}"}, 404)

    app = web.Application(middlewares=[_guard(allowed_hosts)], client_max_size=64 * 1024)
    app.router.add_get("/api/runs", runs)
    app.router.add_get("/api/status", indexer_status)
    app.router.add_get("/api/stream", stream)
    app.router.add_get("/api/runs/{run}", run)
    app.router.add_get("/api/runs/{run}/metrics", metrics)
    app.router.add_get("/api/runs/{run}/clients", clients)
    app.router.add_get("/api/runs/{run}/events", events)
    app.router.add_route("*", "/api/{tail:.*}", api_unknown)
    app.router.add_get("/", page("index.html"))
    app.router.add_get("/runs/{run}", page("run.html"))
    app.router.add_get("/static/{name}", asset)
    return app
