"""A stranger's handshake flood, from one process: `python handshake_flood.py NODE_ID_HEX HOST:PORT SECONDS
[ENDPOINTS] [PARALLEL]`. ENDPOINTS endpoints with fresh keys (none on the target's allowlist) each keep
PARALLEL connection attempts going to the target for SECONDS; prints one JSON line of counts at the end."""

from __future__ import annotations

import asyncio
import json
import sys
import time

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

from cohort.client.p2p.iroh_transport import ALPN


async def flood(node_id: str, addr: str, seconds: float, endpoints: int, parallel: int) -> dict:
    iroh_ffi.uniffi_set_event_loop(asyncio.get_running_loop())
    counts = {"attempts": 0, "handshakes": 0, "refused": 0, "timeouts": 0}
    target = EndpointAddr(EndpointId.from_string(node_id), None, [addr])
    until = time.monotonic() + seconds

    async def attempts(endpoint: Endpoint) -> None:
        while time.monotonic() < until:
            counts["attempts"] += 1
            try:
                conn = await asyncio.wait_for(endpoint.connect(target, ALPN), 2.0)
            except TimeoutError:
                counts["timeouts"] += 1
                continue
            except IrohError:
                counts["refused"] += 1
                continue
            counts["handshakes"] += 1  # completed: the target spent its handshake on a stranger
            try:
                conn.close(0, b"")
            except IrohError:
                pass

    eps = [await Endpoint.bind(EndpointOptions(preset=preset_minimal(), relay_mode=RelayMode.disabled(),
                                               bind_addr="127.0.0.1:0", alpns=[ALPN]))
           for _ in range(endpoints)]  # fmt: skip
    await asyncio.gather(*(attempts(ep) for ep in eps for _ in range(parallel)))
    for ep in eps:
        try:
            async with asyncio.timeout(2):
                await ep.close()
        except (IrohError, TimeoutError):
            pass
    return counts


if __name__ == "__main__":
    node, address, duration = sys.argv[1], sys.argv[2], float(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    k = int(sys.argv[5]) if len(sys.argv) > 5 else 8
    print(json.dumps(asyncio.run(flood(node, address, duration, n, k))), flush=True)
