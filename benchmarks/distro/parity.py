"""Longer loss-parity run: DisTrO (4 replicas) vs AdamW vs sign-SGD at the same bytes, with a plot.

    .venv/bin/python benchmarks/distro/parity.py [--steps 2000] [--out benchmarks/distro/out/parity.png]
    .venv/bin/python benchmarks/distro/parity.py --model 50m --steps 200 --batch 4 --no-signsgd  # ~50M curve

Needs matplotlib for the PNG (pip install matplotlib==3.11.2); without it the table still prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from cohort.client.yardsticks.parity import ParityReport, ParitySetup, run_parity

HERE = Path(__file__).resolve().parent
# Shapes this benchmark adds to the model presets (byte vocabulary, Llama): ~50M parameters is the largest
# whose curve this 2-core machine draws in about an hour.
SHAPES = {
    "50m": {
        "hidden_size": 640,
        "num_hidden_layers": 10,
        "num_attention_heads": 10,
        "num_key_value_heads": 10,
        "intermediate_size": 1728,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    }
}


def setup_for(steps: int, **changes) -> ParitySetup:
    """The benchmark's setup: ParitySetup defaults, warm-up a tenth of the run, 20 evaluations."""
    return dataclasses.replace(
        ParitySetup(),
        steps=steps,
        eval_every=max(1, steps // 20),
        warmup_steps=max(1, steps // 10),
        **changes,
    )


def print_table(report: ParityReport) -> None:
    s = report.setup
    adamw = report.curves.get("adamw")
    print(
        f"\nLoss parity: {s.model} Llama, {s.corpus} bytes, {s.steps} steps, global batch "
        f"{s.global_batch} x {s.seq_len} tokens, {s.replicas} replicas"
    )
    print(f"unigram baseline (held-out nats/token): {report.unigram:.4f}")
    print(
        f"{'contender':<10}{'final held-out':>16}{'vs AdamW':>10}{'upload/step':>14}{'replicas equal':>16}{'time':>9}"
    )
    for c in report.curves.values():
        ratio = f"{c.final / adamw.final:.3f}x" if adamw else "-"
        upload = f"{c.bytes_per_step:,} B" if c.bytes_per_step else "dense"
        equal = "-" if c.name == "adamw" else ("yes" if c.replica_digests == 1 else "NO")
        print(f"{c.name:<10}{c.final:>16.4f}{ratio:>10}{upload:>14}{equal:>16}{c.seconds:>8.0f}s")


def save_plot(report: ParityReport, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib==3.11.2)")
        return False
    labels = {"adamw": "AdamW (dense)", "distro": "DisTrO", "signsgd": "sign-SGD, same bytes"}
    fig, (train_ax, held_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for c in report.curves.values():
        window = max(1, len(c.train) // 50)
        smooth = (
            torch.tensor(c.train).unfold(0, window, 1).mean(1).tolist() if window > 1 else c.train
        )
        train_ax.plot(range(window - 1, window - 1 + len(smooth)), smooth, label=labels[c.name])
        held_ax.plot(c.steps, c.heldout, marker=".", label=f"{labels[c.name]}: {c.final:.3f}")
    for ax, title in ((train_ax, "training loss (moving mean)"), (held_ax, "held-out loss")):
        ax.axhline(
            report.unigram, color="grey", linestyle="--", label=f"unigram {report.unigram:.3f}"
        )
        ax.set_xlabel("step")
        ax.set_ylabel("nats / byte")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    s = report.setup
    fig.suptitle(
        f"{s.model} Llama on {s.corpus}, {s.replicas} replicas x {s.batch_per_replica} x {s.seq_len} tokens, "
        f"DisTrO chunk {s.distro.compression_chunk} top-{s.distro.compression_topk}"
        f"{' 1-bit' if s.distro.quantize_1bit else ''}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = ParitySetup()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument(
        "--model", default=defaults.model, help=f"a Llama preset, or one of {sorted(SHAPES)}"
    )
    parser.add_argument("--corpus", default=defaults.corpus)
    parser.add_argument("--seq", type=int, default=defaults.seq_len)
    parser.add_argument("--replicas", type=int, default=defaults.replicas)
    parser.add_argument(
        "--batch", type=int, default=defaults.batch_per_replica, help="sequences per replica"
    )
    parser.add_argument("--chunk", type=int, default=defaults.distro.compression_chunk)
    parser.add_argument("--topk", type=int, default=defaults.distro.compression_topk)
    parser.add_argument("--eval-every", type=int, default=0, help="default: steps / 20")
    parser.add_argument(
        "--distro-lr", type=float, default=defaults.distro_lr, help="DisTrO's peak rate"
    )
    parser.add_argument(
        "--no-signsgd", action="store_true", help="skip the sign-SGD baseline (faster)"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (default: torch's choice)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "out" / "parity.png")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    setup = setup_for(
        args.steps,
        model=args.model,
        hf_config=SHAPES.get(args.model),
        corpus=args.corpus,
        seq_len=args.seq,
        replicas=args.replicas,
        batch_per_replica=args.batch,
        distro_lr=args.distro_lr,
        distro=dataclasses.replace(
            defaults.distro, compression_chunk=args.chunk, compression_topk=args.topk
        ),
    )
    if args.eval_every:
        setup = dataclasses.replace(setup, eval_every=args.eval_every)
    report = run_parity(
        setup, ("adamw", "distro") if args.no_signsgd else ("adamw", "distro", "signsgd")
    )
    print_table(report)
    if save_plot(report, args.out):
        print(f"plot: {args.out}")
    curves = {name: dataclasses.asdict(c) for name, c in report.curves.items()}
    args.out.with_suffix(".json").write_text(
        json.dumps({"unigram": report.unigram, "curves": curves})
    )


if __name__ == "__main__":
    main()
