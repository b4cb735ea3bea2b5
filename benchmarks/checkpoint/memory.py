"""Checkpoint memory benchmark: how much a save or a load raises a process's peak RSS.

    .venv/bin/python benchmarks/checkpoint/memory.py                       # llama-100m, 8k vocabulary
    .venv/bin/python benchmarks/checkpoint/memory.py --preset llama-20m --vocab 32000 --shard-mib 64

Each operation runs in a fresh process that first builds the model (CPU, fp32 unless --dtype), then resets its
high-water mark (writing "5" to /proc/self/clear_refs) and reads VmHWM after the operation: the
figure is the peak over the RSS the process had just before it, as a multiple of the model's bytes.
Page cache is not RSS; memory-mapped file pages are (which is why a loader that maps the whole file
counts it). Operations:

    save            save_checkpoint (blocking, on the caller's thread)
    writer          CheckpointWriter.submit + result (weights copied once, written in the background)
    load_weights    verify + copy into the live model (a joiner's and the drift repair's path)
    load_checkpoint verify + build a new model from the directory
    from_pretrained plain `transformers.AutoModelForCausalLM.from_pretrained` (for reference)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS = ("save", "writer", "load_weights", "load_checkpoint", "from_pretrained")

CHILD = r"""
import gc, json, sys, time
from pathlib import Path
from cohort.client.model import build_model, config_for
from cohort.sdk.presets import MODEL_PRESETS

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)

import torch
op, preset, vocab, root, shard, identity, dtype = sys.argv[1:8]
p = MODEL_PRESETS[preset]
model = build_model(config_for(p.architecture, p.hf_config, vocab_size=int(vocab), max_seq_len=512))
model = model.to(getattr(torch, dtype))
model_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
params = sum(t.numel() for t in model.parameters())
import cohort.client.checkpoint as ck
from transformers import AutoModelForCausalLM
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = status("VmRSS")
started = time.perf_counter()
if op == "save":
    info = ck.save_checkpoint(model, root, run_id="bench", step=1, epoch=0, max_shard_bytes=int(shard))
    result = {"manifest": info.manifest_hash.hex(), "path": str(info.path)}
elif op == "writer":
    with ck.CheckpointWriter(root, max_shard_bytes=int(shard)) as w:
        info = w.submit(model, run_id="bench", step=2, epoch=0).result()
    result = {}
elif op == "load_weights":
    ck.load_weights(model, root, bytes.fromhex(identity))
    result = {}
elif op == "load_checkpoint":
    loaded = ck.load_checkpoint(root, bytes.fromhex(identity))
    result = {}
else:
    loaded = AutoModelForCausalLM.from_pretrained(root)
    result = {}
elapsed = time.perf_counter() - started
peak = status("VmHWM")
print(json.dumps({**result, "model_bytes": model_bytes, "params": params, "base": base, "peak": peak,
                  "seconds": elapsed}))
"""


def run(op: str, args: argparse.Namespace, root: Path, identity: str = "") -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            op,
            args.preset,
            str(args.vocab),
            str(root),
            str(args.shard_mib << 20),
            identity,
            args.dtype,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(f"{op} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="llama-100m")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--shard-mib", type=int, default=2048, help="max shard size (MiB)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        saved = run("save", args, Path(tmp) / "saved")
        path, identity = Path(saved["path"]), saved["manifest"]
        files = sorted(path.iterdir())
        size = sum(f.stat().st_size for f in files)
        mb = saved["model_bytes"]
        print(
            f"{args.preset} ({args.dtype}), vocabulary {args.vocab}: {saved['params'] / 1e6:.1f}M parameters, "
            f"{mb / 2**20:.0f} MiB of weights; checkpoint {size / 2**20:.0f} MiB in "
            f"{sum(f.suffix == '.safetensors' for f in files)} safetensors file(s)"
        )
        print(f"{'operation':<17}{'peak over base':>16}{'x model':>9}{'seconds':>9}")
        for op in args.ops:
            where = Path(tmp) / op if op in ("save", "writer") else path
            m = saved if op == "save" else run(op, args, where, identity)
            rise = m["peak"] - m["base"]
            print(
                f"{op:<17}{rise / 2**20:>12.0f} MiB{rise / mb:>9.2f}{m['seconds']:>9.2f}",
                flush=True,
            )
            time.sleep(0.1)


if __name__ == "__main__":
    main()
