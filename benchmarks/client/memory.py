"""What one member holds, in bytes per parameter: peak resident memory above the process's import baseline,
divided by the model's parameter count, for the member's own replica code path (`LocalReplica`: train with
lookahead, forward/backward, DisTrO generate and encode; apply of 4 results; with verification: the
weight snapshots and committed states a member keeps, and one real check replayed).

    .venv/bin/python benchmarks/client/memory.py                   # ~10M, ~100M, ~400M (minutes)
    .venv/bin/python benchmarks/client/memory.py --sizes 1.2b      # the llama-1b shape (run alone: ~20 GB)
    .venv/bin/python benchmarks/client/memory.py --activation-checkpointing   # activations of one layer

Each size and mode runs in a fresh process (so peaks do not mix); phases are measured with the kernel's
peak counter (VmHWM), reset between phases through /proc/self/clear_refs. Random tokens over a 32k
vocabulary, 256 tokens a step (one sequence), the example run's DisTrO settings (chunk 64, top-32, 1-bit).
The algorithm itself needs 12 B/param (fp32 weights, gradients, momentum).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

SHAPES = {  # name: (hidden, layers, heads, intermediate, tied)
    "10m": (256, 4, 4, 768, True),
    "100m": (768, 12, 12, 2048, True),
    "400m": (1024, 24, 16, 3072, True),
    "1.2b": (2048, 16, 16, 8192, False),
}
VOCAB, SEQ = 32_000, 256
RESULTS = 4  # applied per step, ours among them
STEPS = 4


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def child(size: str, verified: bool, checkpointing: bool = False) -> dict:
    import torch

    from cohort.client.data import BatchId
    from cohort.client.runtime import trainer as trainer_module
    from cohort.client.verify.sample import PartsOnDisk
    from cohort.sdk.presets import DistroSpec, LrSpec, TrainingSpec

    torch.manual_seed(0)
    torch.set_num_threads(2)
    hidden, layers, heads, inter, tied = SHAPES[size]

    class RandomTokens:
        seq_len, vocab_size, split, num_sequences = SEQ, VOCAB, "train", 1 << 30

        def sequences(self, batch: BatchId) -> torch.Tensor:
            g = torch.Generator().manual_seed(batch.start)
            return torch.randint(0, VOCAB, (len(batch), SEQ), generator=g)

        def close(self) -> None:
            pass

    trainer_module.open_dataset = lambda spec, split="train": RandomTokens()
    spec = TrainingSpec(
        preset=f"bench-{size}", architecture="HfLlama",
        hf_config={"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
                   "num_key_value_heads": heads, "intermediate_size": inter, "tie_word_embeddings": tied,
                   "rms_norm_eps": 1e-5},
        vocab_size=VOCAB, max_seq_len=SEQ, data_location="random", cold_start_warmup_steps=0,
        distro=DistroSpec(compression_decay=0.999, compression_chunk=64, compression_topk=32, weight_decay=0.0,
                          clip_grad_norm=1.0, quantize_1bit=True),
        lr=LrSpec("Constant", 4e-4, 4e-4, 0, 0, 1000),
    )  # fmt: skip
    baseline = _status("VmRSS")
    phases: dict[str, float] = {}
    seconds: dict[str, float] = {}

    def phase(name: str, job, *args, **kwargs):
        _reset_peak()
        started = time.perf_counter()
        out = job(*args, **kwargs)
        seconds[name] = max(seconds.get(name, 0.0), time.perf_counter() - started)
        phases[name] = max(phases.get(name, 0.0), float(_status("VmHWM") - baseline))
        return out

    replica = phase("build", trainer_module.LocalReplica, spec, seed=1, activation_checkpointing=checkpointing)
    params = sum(p.numel() for p in replica.model.parameters())
    replica.start_epoch(0, cold=False, verified=verified)
    states: dict[
        int, object
    ] = {}  # our committed states: on disk, where the blob store serves them from
    payloads: dict[int, bytes] = {}

    for step in range(STEPS):
        out = phase("train", replica.train, step, step, step + 1)
        payloads[step] = out.payload
        states[step] = out.state
        result = replica.codec.decode(out.payload).result
        others = [
            replica.codec.encode(replace(result, batch=BatchId(100 + i, 101 + i)))
            for i in range(RESULTS - 1)
        ]
        phase("apply", replica.apply, step, [out.payload, *others])
    if verified:
        s = STEPS - 1
        # what a verifier fetches, kept on disk as the runtime keeps it: the sign plane and the sampled parts
        seed = b"a check seed"
        manifests = [states[s - 1].manifest.encode(), states[s].manifest.encode()]
        wanted = set(replica.check_parts(seed, *manifests))
        fetched = PartsOnDisk(replica.scratch / "check.parts")
        for h, part in (states[s - 1].read_parts(wanted) | states[s].read_parts(wanted)).items():
            fetched.add(h, part)
        verdict = phase("check", replica.verify_step, s, payloads[s], payloads[s - 1], seed, manifests[0], fetched,
                        manifests[1], fetched)  # fmt: skip
        fetched.close()
        assert verdict is not None and verdict.passed, verdict
    return {"size": size, "params": params, "verified": verified,
            "bytes_per_param": {k: v / params for k, v in phases.items()}, "seconds": seconds}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", nargs="+", default=["10m", "100m", "400m"], choices=sorted(SHAPES)
    )
    parser.add_argument("--modes", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--activation-checkpointing", action="store_true",
                        help="recompute each layer's activations in the backward (LocalReplica's option)")
    parser.add_argument("--child", nargs=2, metavar=("SIZE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1] == "on", args.activation_checkpointing)))
        return
    print(f"{'model':>6} {'params':>13} {'verif.':>6} | {'train':>6} {'apply':>6} {'check':>6} | peak B/param "
          f"(above imports) | train s  apply s  check s")  # fmt: skip
    for size in args.sizes:
        for mode in args.modes:
            flags = ["--activation-checkpointing"] if args.activation_checkpointing else []
            run = subprocess.run(
                [sys.executable, __file__, "--child", size, mode, *flags], capture_output=True, text=True
            )
            if run.returncode != 0:
                print(f"{size:>6} {mode:>6}: failed: {run.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(run.stdout.strip().splitlines()[-1])
            b, t = r["bytes_per_param"], r["seconds"]
            print(f"{size:>6} {r['params']:>13,} {mode:>6} | {b['train']:6.1f} {b['apply']:6.1f} "
                  f"{b.get('check', float('nan')):6.1f} | peak {max(b.values()):5.1f} | "
                  f"{t['train']:7.2f} {t['apply']:8.2f} {t.get('check', float('nan')):8.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
