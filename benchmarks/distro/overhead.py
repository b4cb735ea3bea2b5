"""DisTrO's cost per step next to the forward+backward pass it rides on.

Measured side by side in one process, median of --repeat runs after a warm-up:
    fwd+bwd   one replica's forward and backward on a (batch x seq) micro-batch
    distro    lookahead + generate + encode + decode of --peers payloads + aggregate + apply
The DisTrO part does not depend on the batch; fwd+bwd grows with it, so the ratio falls as
1 / tokens per step.

    .venv/bin/python benchmarks/distro/overhead.py --model tiny
    .venv/bin/python benchmarks/distro/overhead.py --model 100m --batch 4 --seq 256
    .venv/bin/python benchmarks/distro/overhead.py --model 1b --device cuda --batch 8 --seq 2048
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from cohort.client.distro import BatchId, Constant, DistroConfig, DistroOptimizer
from cohort.client.model import build_model, llama_config, lm_loss


@dataclass
class Overhead:
    model: str
    params: int
    tokens: int
    fwd_bwd_s: float
    distro_s: float
    parts_s: dict[str, float]

    @property
    def ratio(self) -> float:
        return self.distro_s / self.fwd_bwd_s


def _timer(device: torch.device) -> Callable[[], float]:
    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    return now


def measure(
    preset: str,
    device: str = "cpu",
    batch: int = 8,
    seq: int = 128,
    peers: int = 4,
    repeat: int = 5,
    config: DistroConfig | None = None,
    dtype: torch.dtype = torch.float32,
) -> Overhead:
    dev = torch.device(device)
    now = _timer(dev)
    config = config or DistroConfig(compression_chunk=64, compression_topk=4, quantize_1bit=True)
    model = build_model(llama_config(preset, max_seq_len=max(seq, 64)), seed=0, device=dev).to(
        dtype
    )
    vocab = model.config.vocab_size
    tokens = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0)).to(
        dev
    )
    optimizer = DistroOptimizer(model.named_parameters(), config, Constant(1e-4))

    def backward() -> None:
        model.zero_grad(set_to_none=True)
        lm_loss(model, tokens).backward()

    # the other peers' payloads of the same step (setup, not timed)
    backward()
    others = [optimizer.codec.encode(optimizer.generate(2, BatchId(p, p))) for p in range(1, peers)]
    optimizer.reset_momentum()

    fwd_bwd, distro, parts = [], [], {k: [] for k in ("generate", "encode", "decode", "apply")}
    for step in range(2, 3 + repeat):  # the first round is the warm-up
        t0 = now()
        backward()
        t1 = now()
        optimizer.lookahead(step)
        result = optimizer.generate(step, BatchId(0, 0))
        t2 = now()
        payload = optimizer.codec.encode(result)
        t3 = now()
        received = [optimizer.codec.decode(p) for p in [payload, *others]]
        t4 = now()
        optimizer.apply(step, received)
        t5 = now()
        if step > 2:
            fwd_bwd.append(t1 - t0)
            distro.append(t5 - t1)
            for name, span in zip(parts, (t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                parts[name].append(span)
        others = [_restep(p, step + 1) for p in others]
    return Overhead(
        model=preset,
        params=sum(p.numel() for p in model.parameters()),
        tokens=batch * seq,
        fwd_bwd_s=statistics.median(fwd_bwd),
        distro_s=statistics.median(distro),
        parts_s={k: statistics.median(v) for k, v in parts.items()},
    )


def _restep(payload: bytes, step: int) -> bytes:
    """The same payload relabelled for the next step (offset 8 holds the u64 step)."""
    return payload[:8] + step.to_bytes(8, "little") + payload[16:]


def print_table(rows: list[tuple[str, Overhead]]) -> None:
    print("\nDisTrO overhead per step vs forward+backward (chunk 64, top-4, 1-bit, 4 peers)")
    header = f"{'model':<8}{'device':<8}{'params':>9}{'tokens':>8}{'fwd+bwd':>10}{'distro':>10}{'ratio':>8}"
    print(header + "   generate / encode / decode / apply")
    for device, r in rows:
        p = r.parts_s
        print(
            f"{r.model:<8}{device:<8}{r.params / 1e6:>8.1f}M{r.tokens:>8}{r.fwd_bwd_s * 1e3:>8.1f}ms"
            f"{r.distro_s * 1e3:>8.1f}ms{r.ratio:>8.1%}   "
            f"{p['generate'] * 1e3:.1f} / {p['encode'] * 1e3:.1f} / {p['decode'] * 1e3:.1f} / {p['apply'] * 1e3:.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny", help="model preset: tiny, small, 100m, 1b")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--batch", type=int, default=8, help="sequences per micro-batch")
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bf16", action="store_true", help="bf16 weights (momentum stays fp32)")
    args = parser.parse_args()
    result = measure(
        args.model,
        args.device,
        args.batch,
        args.seq,
        args.peers,
        args.repeat,
        dtype=torch.bfloat16 if args.bf16 else torch.float32,
    )
    print_table([(args.device, result)])


if __name__ == "__main__":
    main()
