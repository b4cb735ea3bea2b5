"""Throughput of the localnet: sendTransaction over RPC vs LiteSVM in-process, side by side in one run.

    .venv/bin/python benchmarks/localnet/run.py [--n 6000] [--concurrency 32]

Both paths execute the same kind of pre-signed transfers. In-process: LiteSVM with signature verification,
blockhash check and history on (its defaults). RPC: a localnet started as `python -m cohort.localnet start`
(its own process), a raw aiohttp client with 32 requests in flight, `sendTransaction` with preflight, once
in memory and once with `--ledger` (every transaction fsync'd before the answer). Target: RPC >= 0.25x.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from solders.hash import Hash
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import VersionedTransaction

from cohort.localnet.server import free_port_pair

TARGET_RATIO = 0.25


def transfers(payer: Keypair, blockhash: Hash, n: int) -> list[VersionedTransaction]:
    """n distinct signed transfers from `payer` (to a few recipients, distinct amounts)."""
    recipients = [Pubkey.new_unique() for _ in range(16)]
    return [
        VersionedTransaction(
            MessageV0.try_compile(
                payer.pubkey(),
                [
                    transfer(
                        TransferParams(
                            from_pubkey=payer.pubkey(),
                            to_pubkey=recipients[i % 16],
                            lamports=10**7 + i,
                        )
                    )
                ],
                [],
                blockhash,
            ),
            [payer],
        )
        for i in range(n)
    ]


def in_process_tps(n: int) -> float:
    svm = LiteSVM()
    payer = Keypair()
    svm.airdrop(payer.pubkey(), 10**14)
    txs = transfers(payer, svm.latest_blockhash(), n)
    start = time.perf_counter()
    for tx in txs:
        result = svm.send_transaction(tx)
    elapsed = time.perf_counter() - start
    assert type(result).__name__ == "TransactionMetadata", result
    return n / elapsed


async def rpc(session: aiohttp.ClientSession, url: str, method: str, *params) -> object:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
    async with session.post(url, json=body) as r:
        response = await r.json()
    if "error" in response:
        raise RuntimeError(f"{method}: {response['error']}")
    return response["result"]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to see the server's own cost per transaction."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def rpc_tps(n: int, concurrency: int, ledger: Path | None) -> tuple[float, float]:
    """(transactions per second, server CPU microseconds per transaction)."""
    port = free_port_pair()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "cohort.localnet", "start", "--port", str(port)]
    if ledger is not None:
        command += ["--ledger", str(ledger)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            for _ in range(200):
                try:
                    await rpc(session, url, "getHealth")
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            payer = Keypair()
            await rpc(session, url, "requestAirdrop", str(payer.pubkey()), 10**14)
            blockhash = (await rpc(session, url, "getLatestBlockhash"))["value"]["blockhash"]
            bodies = [
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "sendTransaction",
                        "params": [base64.b64encode(bytes(tx)).decode(), {"encoding": "base64"}],
                    }
                ).encode()
                for i, tx in enumerate(transfers(payer, Hash.from_string(blockhash), n))
            ]
            queue = iter(bodies)
            failures: list[object] = []
            headers = {"Content-Type": "application/json"}

            async def worker() -> None:
                for body in queue:
                    async with session.post(url, data=body, headers=headers) as r:
                        response = await r.read()
                    if b'"result"' not in response:
                        failures.append(response)

            cpu_before = process_cpu_seconds(server.pid)
            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - start
            server_cpu = process_cpu_seconds(server.pid) - cpu_before
            if failures:
                raise RuntimeError(f"{len(failures)} sends failed, e.g. {failures[0]}")
            count = await rpc(session, url, "getTransactionCount")
            assert count >= n, (count, n)
        return n / elapsed, server_cpu / n * 1e6
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=6000, help="transactions per measurement")
    parser.add_argument("--concurrency", type=int, default=32, help="RPC requests in flight")
    args = parser.parse_args()
    if args.n < 100 or args.concurrency < 1:
        parser.error("--n must be >= 100 and --concurrency >= 1")

    print(
        f"machine load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs",
        flush=True,
    )
    baseline = in_process_tps(args.n)
    memory, memory_cpu = asyncio.run(rpc_tps(args.n, args.concurrency, None))
    with tempfile.TemporaryDirectory() as tmp:
        durable, durable_cpu = asyncio.run(rpc_tps(args.n, args.concurrency, Path(tmp) / "ledger"))
    # the in-process figure again: drift between the two shows how busy the machine was
    again = in_process_tps(args.n)
    best = max(baseline, again)

    print(f"{'path':50} {'tx/s':>8} {'ratio':>7} {'server us/tx':>13}")
    print(f"{'LiteSVM in-process (sigverify, history on)':50} {baseline:8.0f}")
    print(f"{'  measured again after the RPC runs':50} {again:8.0f}")
    for name, tps, cpu in (
        ("RPC sendTransaction + preflight, in memory", memory, memory_cpu),
        ("RPC sendTransaction + preflight, --ledger fsync", durable, durable_cpu),
    ):
        print(f"{name:50} {tps:8.0f} {tps / best:7.3f} {cpu:13.0f}")
    for name, tps in (("in memory", memory), ("with --ledger (fsync before each answer)", durable)):
        ratio = tps / best
        verdict = "meets" if ratio >= TARGET_RATIO else "misses"
        print(f"RPC / in-process, {name}: {ratio:.3f} ({verdict} the {TARGET_RATIO} target)")
    capacity = 1e6 / max(memory_cpu, durable_cpu) / best
    print(f"server-CPU-bound ratio (1 / server us per tx, vs in-process): {capacity:.3f}")


if __name__ == "__main__":
    main()
