"""Which precision a replica's weights need: how many of DisTrO's sign-SGD updates survive in each dtype.

Every replica applies w -= lr * sign(direction), so each update is exactly lr in size. A weight stored in a
format whose spacing near |w| exceeds 2 * lr never moves (the step rounds away); one whose spacing is
comparable moves by the wrong amount. This counts, over the weights of a freshly built model of the run's
architecture (the RMSNorm weights start at 1.0, the matrices at ~0.02), the share of updates that are lost
(the weight is unchanged) and the mean relative error of those that land, for each dtype and learning rate.

    .venv/bin/python benchmarks/distro/precision.py [--preset llama-20m]

What it decided (llama-20m at a 32k vocabulary, fresh weights): weights, gradients and momentum stay fp32
(12 B/param). In bf16 every update of a norm weight is lost at all three rates (its spacing at 1.0 is
7.8e-3), and the updates of the ~0.02 matrices land 1.8% / 7.3% / 16.6% off at lr 1e-3 / 4e-4 / 1e-4 (12%
lost at 1e-4); fp16 loses half the norm updates at 4e-4 and all at 1e-4. Trained weights grow, so the real
losses only rise. Compute precision (autocast of forward/backward) changes no stored state: the GPU check
(benchmarks/gpu/) measures it.
"""

from __future__ import annotations

import argparse

import torch

from cohort.client.model import build_model, config_for
from cohort.sdk.presets import MODEL_PRESETS

RATES = (1e-3, 4e-4, 1e-4)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def kind(name: str) -> str:
    if "norm" in name:
        return "norms"
    if "embed" in name or "lm_head" in name:
        return "embeddings"
    return "matrices"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="llama-20m", choices=sorted(MODEL_PRESETS))
    parser.add_argument("--vocab", type=int, default=32_000)
    args = parser.parse_args()
    preset = MODEL_PRESETS[args.preset]
    config = config_for(
        preset.architecture, preset.hf_config, vocab_size=args.vocab, max_seq_len=256
    )
    model = build_model(config, seed=0)
    groups: dict[str, list[torch.Tensor]] = {}
    for name, p in model.named_parameters():
        groups.setdefault(kind(name), []).append(p.detach().reshape(-1))
    weights = {k: torch.cat(v) for k, v in groups.items()}
    print(f"{args.preset}: {sum(w.numel() for w in weights.values()):,} parameters; share of updates lost / "
          f"mean relative error of the rest")  # fmt: skip
    print(f"{'dtype':>5} {'lr':>7} | " + " | ".join(f"{k:>22}" for k in weights))
    for dname, dtype in DTYPES.items():
        for lr in RATES:
            cells = []
            for w in weights.values():
                stored = w.to(dtype)
                sign = torch.where(torch.arange(w.numel()) % 2 == 0, 1.0, -1.0).to(dtype)
                moved = stored - sign * torch.tensor(lr, dtype=dtype)
                step = (stored.double() - moved.double()).abs()
                lost = float((step == 0).double().mean())
                landed = step[step > 0]
                error = float(((landed - lr).abs() / lr).mean()) if landed.numel() else float("nan")
                cells.append(f"{lost:9.1%} / {error:9.2%}")
            print(f"{dname:>5} {lr:7.0e} | " + " | ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
