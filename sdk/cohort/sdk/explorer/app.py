"""`Explorer`: the indexer and the server together, started in-process.

async with Explorer(cluster_url, ws_url, program_id, db_path) as ex:
    print(ex.url)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web
from solders.pubkey import Pubkey

from cohort.localnet.config import is_loopback

from ..coordinator_core import CoordinatorCore
from ..rpc import Rpc
from . import DEFAULT_PORT
from .indexer import Indexer
from .server import ChangeFeed, make_app
from .store import Store

log = logging.getLogger("cohort.sdk.explorer")


class Explorer:
    """Index `program_ids` on the cluster at `cluster_url` into `db_path` and serve the pages on
    http://host:port (port 0: any free port; `url` tells which). With `treasurer_id`, runs that have a
    treasury show their rewards."""

    def __init__(
        self,
        cluster_url: str | Sequence[str],
        ws_url: str | None,
        program_ids: Pubkey | Sequence[Pubkey],
        db_path: str | Path,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        poll_interval: float = 3.0,
        max_backoff: float = 30.0,
        core: CoordinatorCore | None = None,
        treasurer_id: Pubkey | None = None,
    ) -> None:
        urls = [cluster_url] if isinstance(cluster_url, str) else list(cluster_url)
        self.cluster_url = urls[0]
        self.host, self.port = host, port
        self.store = Store(db_path)
        self.rpc = Rpc(urls, retries=2, backoff=0.2, timeout=10.0)
        self.feed = ChangeFeed()
        ids = [program_ids] if isinstance(program_ids, Pubkey) else list(program_ids)
        self.indexer = Indexer(
            self.store, self.rpc, ids, ws_url=ws_url, core=core, poll_interval=poll_interval,
            max_backoff=max_backoff, on_change=self.feed.publish, treasurer_id=treasurer_id,
        )  # fmt: skip
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        if not is_loopback(self.host):
            log.warning(
                "the explorer listens on %s, not only on this machine: anyone who can reach it "
                "sees every indexed run", self.host,
            )  # fmt: skip
        local = frozenset({"localhost", "127.0.0.1", "[::1]", self.host.lower()})
        allowed = local if is_loopback(self.host) else None
        app = make_app(
            self.store, lambda: self.indexer.status, self.feed, self.cluster_url, allowed
        )
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]
        self._task = asyncio.create_task(self.indexer.run(), name="explorer-indexer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._runner is not None:
            await self._runner.cleanup()
        await self.rpc.close()
        self.store.close()

    async def serve_forever(self) -> None:
        assert self._task is not None, "start() first"
        await self._task

    async def __aenter__(self) -> Explorer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
