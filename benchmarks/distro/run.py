"""DisTrO figures in one run: compression ratio, overhead vs fwd+bwd, loss parity (+ plot).

    .venv/bin/python benchmarks/distro/run.py            # everything (parity: 2000 steps, ~1 h on 2 cores)
    .venv/bin/python benchmarks/distro/run.py --quick    # minutes: 1B compression, tiny overhead, 200-step parity
    .venv/bin/python benchmarks/distro/run.py --device cuda --overhead-models 1b --skip-parity

Each part is also a script of its own (compression.py, overhead.py, parity.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compression
import overhead
import parity

from cohort.client.yardsticks.parity import run_parity

# per-preset micro-batches for the overhead figure: (sequences, tokens per sequence); the
# ratio falls as 1 / tokens, so the tiny model is shown at two sizes
OVERHEAD_BATCHES = {
    "tiny": [(8, 128), (32, 128)],
    "small": [(8, 128)],
    "100m": [(4, 512)],
    "1b": [(8, 2048)],
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu", help="device for the overhead part (cpu, cuda)")
    parser.add_argument(
        "--overhead-models", default=None, help="comma list (default tiny,100m; --quick: tiny)"
    )
    parser.add_argument(
        "--parity-steps", type=int, default=None, help="default 2000 (--quick: 200)"
    )
    parser.add_argument("--skip-parity", action="store_true")
    parser.add_argument("--out", type=Path, default=parity.HERE / "out" / "parity.png")
    args = parser.parse_args()

    rows = compression.run("1b", 64)
    compression.print_table("1b", 64, rows)

    models = (args.overhead_models or ("tiny" if args.quick else "tiny,100m")).split(",")
    results = []
    for name in models:
        for batch, seq in OVERHEAD_BATCHES.get(name, [(8, 128)]):
            measured = overhead.measure(
                name, args.device, batch, seq, repeat=3 if args.quick else 5
            )
            results.append((args.device, measured))
    overhead.print_table(results)

    if not args.skip_parity:
        steps = args.parity_steps or (200 if args.quick else 2000)
        report = run_parity(parity.setup_for(steps), ("adamw", "distro", "signsgd"))
        parity.print_table(report)
        if parity.save_plot(report, args.out):
            print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
