"""Bytes per check: what a verifier fetches of a trainer's two committed states, against the states' size.

    .venv/bin/python benchmarks/integrity/check_bytes.py            # ~20M and ~100M measured, 1.2B and 8B computed

At ~20M and ~100M a real `LocalReplica` trains three steps with verification on, writes its committed states
as a member does, and a second replica of the same run checks the last step the way the runtime does
(`check_parts` names the parts, only those are handed over): the bytes printed are those parts plus the two
manifests, and the verdict must pass. At 1.2B (`llama-1b`) and 8B (the Llama-3-8B shape) the same arithmetic
(`verify.sample.check_bytes`) runs on the layout of a model built on the meta device (no memory). The
example run's DisTrO settings (chunk 64, top-32, 1-bit); random tokens over a 32k vocabulary.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from memory import (  # the memory benchmark's spec and random tokens
    SEQ,
    bench_spec,
    use_random_tokens,
)

SHAPES = {  # name: (hidden, layers, heads, kv heads, intermediate, vocab, tied)
    "20m": (384, 6, 6, 6, 1024, 32_000, True),
    "100m": (768, 12, 12, 12, 2048, 32_000, True),
    "1.2b": (2048, 16, 16, 16, 8192, 32_000, False),
    "8b": (4096, 32, 32, 8, 14336, 128_256, False),
}
MEASURED, COMPUTED = ("20m", "100m"), ("1.2b", "8b")


def _spec(size: str):
    hidden, layers, heads, kv, inter, vocab, tied = SHAPES[size]
    return bench_spec(f"bench-{size}", hidden, layers, heads, inter, tied, kv_heads=kv, vocab=vocab)


def measured(size: str) -> dict:
    from cohort.client.runtime import trainer as trainer_module

    use_random_tokens(SHAPES[size][5])
    spec = _spec(size)
    with tempfile.TemporaryDirectory() as scratch:
        trainer = trainer_module.LocalReplica(spec, seed=1, scratch=Path(scratch) / "t")
        verifier = trainer_module.LocalReplica(spec, seed=1, scratch=Path(scratch) / "v")
        for r in (trainer, verifier):
            r.start_epoch(0, cold=False, verified=True)
        outs = []
        for step in range(3):
            out, own = (
                trainer.train(step, 2 * step, 2 * step + 1),
                verifier.train(step, 2 * step + 1, 2 * step + 2),
            )
            outs.append(out)
            for r in (trainer, verifier):
                r.apply(step, [out.payload, own.payload])
        seed = b"a check seed"
        before, after = outs[1].state, outs[2].state
        manifests = [before.manifest.encode(), after.manifest.encode()]
        wanted = set(verifier.check_parts(seed, *manifests))
        parts = before.read_parts(wanted) | after.read_parts(wanted)
        started = time.perf_counter()
        verdict = verifier.verify_step(2, outs[2].payload, outs[1].payload, seed, manifests[0], parts, manifests[1],
                                       parts)  # fmt: skip
        seconds = time.perf_counter() - started
        assert verdict is not None and verdict.passed, verdict
        whole = sum(f.size for f in before.manifest.files if f.name == "state.bin")
        fetched = sum(len(p) for p in parts.values()) + sum(len(m) for m in manifests)
        params = sum(p.numel() for p in trainer.model.parameters())
    return {"params": params, "state": whole, "fetched": fetched, "check_s": seconds,
            "sampled": verdict.metrics["sampled"]}  # fmt: skip


def computed(size: str) -> dict:
    from cohort.client.distro import plan_layout
    from cohort.client.model import build_model, config_for
    from cohort.client.runtime.trainer import distro_config
    from cohort.client.verify.sample import check_bytes, sample_bands, sampled_fraction
    from cohort.client.verify.state import state_size

    spec = _spec(size)
    config = config_for(
        spec.architecture, spec.hf_config, vocab_size=spec.vocab_size, max_seq_len=SEQ
    )
    model = build_model(config, device="meta")
    shapes = [(name, tuple(p.shape)) for name, p in model.named_parameters()]
    layout = plan_layout(shapes, distro_config(spec.distro))
    samples = sample_bands(layout, b"a check seed")
    return {"params": sum(p.numel() for p in model.parameters()), "state": state_size(layout, True),
            "fetched": check_bytes(layout, samples), "check_s": None,
            "sampled": sampled_fraction(layout, samples)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", nargs="+", default=[*MEASURED, *COMPUTED], choices=sorted(SHAPES)
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"{'model':>6} {'params':>15} {'how':>9} | {'two whole states':>16} {'a check fetches':>16} "
          f"{'ratio':>7} | sampled values   check s")  # fmt: skip
    for size in args.sizes:
        r = measured(size) if size in MEASURED else computed(size)
        two = 2 * r["state"]
        seconds = "" if r["check_s"] is None else f"{r['check_s']:8.2f}"
        print(f"{size:>6} {r['params']:>15,} {'measured' if size in MEASURED else 'computed':>9} | "
              f"{two / 1e9:13.3f} GB {r['fetched'] / 1e9:13.3f} GB {two / r['fetched']:6.1f}x | "
              f"{r['sampled']:14.4f} {seconds}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
