"""Data provider benchmark: tokens/s of the same batches through each provider.

    .venv/bin/python benchmarks/data/run.py                 # KJV bytes, seq 512, batches of 32
    .venv/bin/python benchmarks/data/run.py --seq-len 2048 --batch 8 --batches 100

The KJV is prepared once (byte tokenizer, shards of 1M tokens). Each provider then serves the same
random batch ids: built-in (in memory), local (memory-mapped shards), HTTP (an aiohttp static server
in another process; range requests of 1 MiB verified chunks; cold = empty cache, warm = the same
batches again) and TCP (`cohort data serve` in another process). Everything is on loopback and on
this machine's cores: the figures compare the providers, they are not link speeds.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from cohort.client.data import BatchId, ByteTokenizer, open_data_location, prepare

STATIC_SERVER = """
import asyncio, sys
from aiohttp import web
async def main():
    app = web.Application(); app.router.add_static("/", sys.argv[1])
    runner = web.AppRunner(app); await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0); await site.start()
    print(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def start(args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def throughput(provider, batches: list[BatchId], reference: list[torch.Tensor]) -> float:
    started = time.perf_counter()
    tokens = 0
    for batch, expected in zip(batches, reference, strict=True):
        got = provider.sequences(batch)
        tokens += got.numel()
        assert torch.equal(got, expected)
    return tokens / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "kjv"
        t = time.perf_counter()
        prepared = prepare("kjv", ByteTokenizer(), data, shard_tokens=1 << 20)
        print(
            f"prepare kjv: {prepared.n_tokens / 1e6:.2f}M tokens in {prepared.shards} shards, "
            f"{time.perf_counter() - t:.2f} s"
        )
        builtin = open_data_location("kjv", args.seq_len)
        starts = [rng.randrange(builtin.num_sequences) for _ in range(args.batches)]
        batches = [BatchId(s, s + args.batch) for s in starts]
        reference = [builtin.sequences(b) for b in batches]
        http_proc, http_base = start([sys.executable, "-c", STATIC_SERVER, tmp])
        tcp_proc, line = start(
            [str(Path(sys.executable).parent / "cohort"), "data", "serve", str(data)]
        )
        try:
            rows = [
                ("built-in (memory)", builtin),
                ("local (mmap)", open_data_location(str(data), args.seq_len)),
            ]
            http = open_data_location(f"{http_base}/kjv", args.seq_len)
            tcp = open_data_location(line.rsplit(" at ", 1)[1], args.seq_len)
            print(
                f"{args.batches} batches of {args.batch} x {args.seq_len} tokens (random batch ids)"
            )
            for name, provider in rows:
                print(
                    f"  {name:<20}{throughput(provider, batches, reference) / 1e6:>10.2f} M tokens/s"
                )
            print(
                f"  {'http (cold cache)':<20}{throughput(http, batches, reference) / 1e6:>10.2f} M tokens/s"
                f"   ({http.source.requests} range requests)"
            )
            print(
                f"  {'http (warm cache)':<20}{throughput(http, batches, reference) / 1e6:>10.2f} M tokens/s"
            )
            print(f"  {'tcp':<20}{throughput(tcp, batches, reference) / 1e6:>10.2f} M tokens/s")
            http.close()
            tcp.close()
        finally:
            for proc in (http_proc, tcp_proc):
                proc.kill()
                proc.wait(timeout=30)
                proc.stdout.close()


if __name__ == "__main__":
    main()
