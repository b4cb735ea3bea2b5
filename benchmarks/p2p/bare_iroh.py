"""The floor under the iroh figures: a 64 MiB transfer over raw iroh streams, without cohort's framing,
allowlist or hashing. A serving process writes 1 MiB chunks; the client reads 1 MiB at a time.

    python benchmarks/p2p/bare_iroh.py serve          # prints "<node id> <address>", serves until killed
    (run.py starts it and measures; see bare_iroh_rate)
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time

from iroh import (
    Endpoint,
    EndpointAddr,
    EndpointId,
    EndpointOptions,
    RelayMode,
    iroh_ffi,
    preset_minimal,
)

import cohort.client.p2p.iroh_fix  # noqa: F401  (the send-path fix: without it iroh sends at ~9 MB/s)

ALPN = b"cohort/bench-bare/1"
SIZE = 64 << 20
CHUNK = 1 << 20


async def _bind() -> Endpoint:
    iroh_ffi.uniffi_set_event_loop(asyncio.get_running_loop())
    options = EndpointOptions(
        preset=preset_minimal(),
        relay_mode=RelayMode.disabled(),
        bind_addr="127.0.0.1:0",
        alpns=[ALPN],
    )
    return await Endpoint.bind(options)


async def _serve() -> None:
    blob = os.urandom(CHUNK) * (SIZE // CHUNK)
    endpoint = await _bind()
    print(endpoint.id(), endpoint.addr().direct_addresses()[0], flush=True)

    async def handle(conn) -> None:
        while True:
            bi = await conn.accept_bi()
            send, recv = bi.send(), bi.recv()
            await recv.read_to_end(64)
            for offset in range(0, SIZE, CHUNK):
                await send.write_all(blob[offset : offset + CHUNK])
            await send.finish()

    tasks = set()
    while True:
        incoming = await endpoint.accept_next()
        if incoming is None:
            return
        conn = await (await incoming.accept()).connect()
        task = asyncio.ensure_future(handle(conn))
        tasks.add(task)


async def _fetch_rates(node: str, address: str, reps: int) -> tuple[float, float]:
    """(median MiB/s, client CPU ms per MiB) over `reps` transfers on one connection."""
    endpoint = await _bind()
    try:
        conn = await endpoint.connect(
            EndpointAddr(EndpointId.from_string(node), None, [address]), ALPN
        )
        rates, cpus = [], []
        for _ in range(reps):
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            bi = await conn.open_bi()
            send, recv = bi.send(), bi.recv()
            await send.write_all(b"go")
            await send.finish()
            got = 0
            while chunk := await recv.read(CHUNK):
                got += len(chunk)
            seconds = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
            assert got == SIZE, f"short transfer: {got} bytes"
            rates.append(SIZE / seconds / 2**20)
            used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            cpus.append(used * 1000 / (SIZE / 2**20))
        conn.close(0, b"done")
        return sorted(rates)[len(rates) // 2], sorted(cpus)[len(cpus) // 2]
    finally:
        await endpoint.close()
        iroh_ffi.uniffi_set_event_loop(None)


def bare_iroh_rate(reps: int) -> tuple[float, float]:
    """Start a bare serving process, fetch 64 MiB `reps` times in a child process, stop the server."""
    server = subprocess.Popen(
        [sys.executable, __file__, "serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        node, address = server.stdout.readline().split()
        out = subprocess.run(
            [sys.executable, __file__, "fetch", node, address, str(reps)],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        rate, cpu = out.stdout.split()
        return float(rate), float(cpu)
    finally:
        server.kill()
        server.wait(timeout=10)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        asyncio.run(_serve())
    elif sys.argv[1:2] == ["fetch"]:
        rate, cpu = asyncio.run(_fetch_rates(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        print(rate, cpu)
    else:
        sys.exit(__doc__)
