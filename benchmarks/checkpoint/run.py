"""Checkpoint benchmark: save and load times and sizes for the tiny and ~20M presets.

    .venv/bin/python benchmarks/checkpoint/run.py            # llama-tiny, deepseek-tiny, llama-20m
    .venv/bin/python benchmarks/checkpoint/run.py --presets llama-20m --repeats 5

Per preset (byte vocabulary, fp32 weights, CPU): snapshot (the part that pauses training: weights
copied to CPU memory), write (safetensors + config + cohort.json, fsync'd, renamed into place),
manifest hash (reads every byte), load (verify + `AutoModelForCausalLM.from_pretrained`),
load_weights (verify + copy into a live model, the drift repair path) and the P2P fetch of the
directory from one peer over loopback HTTP (verified chunks). Medians over the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cohort.client.checkpoint import (
    FromPeers,
    fetch_checkpoint,
    load_checkpoint,
    load_weights,
    manifest_hash,
    snapshot,
    write_checkpoint,
)
from cohort.client.model import build_model, config_for
from cohort.client.p2p import NodeKey, P2PNode
from cohort.sdk.presets import MODEL_PRESETS


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


async def p2p_fetch(path: Path, identity: bytes, dest: Path) -> float:
    async with (
        P2PNode.http(NodeKey.generate(), "bench") as server,
        P2PNode.http(NodeKey.generate(), "bench") as joiner,
    ):
        for node in (server, joiner):
            node.set_clients([server.address, joiner.address])
        await server.share_directory(path)
        started = time.perf_counter()
        await fetch_checkpoint(FromPeers(joiner, (server.address,)), identity, dest)
        return time.perf_counter() - started


def bench(preset: str, repeats: int, root: Path) -> dict[str, float]:
    p = MODEL_PRESETS[preset]
    model = build_model(config_for(p.architecture, p.hf_config, vocab_size=256, max_seq_len=512))
    params = sum(t.numel() for t in model.parameters())
    rows: dict[str, list[float]] = {
        k: [] for k in ("snapshot", "write", "hash", "load", "load_weights", "p2p")
    }
    size = 0
    for r in range(repeats):
        t, snap = timed(lambda r=r: snapshot(model, run_id="bench", step=r, epoch=0))
        rows["snapshot"].append(t)
        t, info = timed(lambda snap=snap: write_checkpoint(snap, root / preset, keep_last=1))
        rows["write"].append(t)
        size = sum(f.stat().st_size for f in info.path.iterdir())
        rows["hash"].append(timed(lambda info=info: manifest_hash(info.path))[0])
        rows["load"].append(
            timed(lambda info=info: load_checkpoint(info.path, info.manifest_hash))[0]
        )
        rows["load_weights"].append(
            timed(lambda info=info: load_weights(model, info.path, info.manifest_hash))[0]
        )
        dest = root / f"{preset}-joined"
        shutil.rmtree(dest, ignore_errors=True)
        rows["p2p"].append(asyncio.run(p2p_fetch(info.path, info.manifest_hash, dest)))
    medians = {k: statistics.median(v) for k, v in rows.items()}
    medians["params_m"] = params / 1e6
    medians["size_mib"] = size / 2**20
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presets", nargs="+", default=["llama-tiny", "deepseek-tiny", "llama-20m"]
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'preset':<15}{'params':>9}{'size':>10}{'snapshot':>10}{'write':>8}{'hash':>8}"
        f"{'load':>8}{'load_w':>8}{'p2p':>8}   (seconds, medians of {args.repeats})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            m = bench(preset, args.repeats, Path(tmp))
            print(
                f"{preset:<15}{m['params_m']:>8.2f}M{m['size_mib']:>7.1f}MiB{m['snapshot']:>10.3f}"
                f"{m['write']:>8.3f}{m['hash']:>8.3f}{m['load']:>8.3f}{m['load_weights']:>8.3f}"
                f"{m['p2p']:>8.3f}",
                flush=True,
            )
    sys.exit(0)


if __name__ == "__main__":
    main()
