"""A static file server with range requests (aiohttp), for HTTP provider tests.

python static_server.py ROOT   → prints "http://127.0.0.1:PORT" and serves ROOT until killed
"""

import asyncio
import sys

from aiohttp import web


async def main(root: str) -> None:
    app = web.Application()
    app.router.add_static("/", root)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
