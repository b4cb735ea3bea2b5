"""Wire bytes per client per step and compression ratio vs dense bf16, for a ~1B Llama.

For every bucket of equal-shaped parameters one real random tensor is transformed and
compressed; its tiles stand in for every member of the bucket (payload sizes depend only on
tile counts), and the whole payload is then encoded for real and its bytes counted.

    .venv/bin/python benchmarks/distro/compression.py [--model 1b] [--chunk 64]
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import LlamaForCausalLM

from cohort.client.distro import (
    BatchId,
    DistroConfig,
    DistroResult,
    SparseTiles,
    WireCodec,
    plan_layout,
)
from cohort.client.distro.compress import compress
from cohort.client.distro.dct import encode
from cohort.client.model import llama_config

# (label, top-k, 1-bit, value dtype when not 1-bit)
VARIANTS = [
    ("k=4, 1-bit (Consilience)", 4, True, "bf16"),
    ("k=8, 1-bit (Psyche book)", 8, True, "bf16"),
    ("k=4, bf16 values", 4, False, "bf16"),
    ("k=32, bf16 values (DeMo)", 32, False, "bf16"),
]


def parameter_shapes(preset: str) -> list[tuple[str, tuple[int, ...]]]:
    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(preset))
    return [(name, tuple(p.shape)) for name, p in model.named_parameters()]


def measure(shapes, chunk: int, topk: int, one_bit: bool, value_dtype: str, seed: int = 0) -> dict:
    config = DistroConfig(
        compression_chunk=chunk,
        compression_topk=topk,
        quantize_1bit=one_bit,
        value_dtype=value_dtype,
    )
    layout = plan_layout(shapes, config)
    codec = WireCodec.for_config(layout, config)
    generator = torch.Generator().manual_seed(seed)
    tiles = []
    for b in layout.buckets:
        one = compress(encode(torch.randn(b.shape, generator=generator), b.tile), b.topk)
        count = len(b.members)
        tiles.append(SparseTiles(one.indices.repeat(count, 1), one.values.repeat(count, 1)))
    payload = codec.encode(DistroResult(0, BatchId(0, 0), tuple(tiles)))
    assert len(payload) == codec.size
    codec.decode(payload)  # and it is a valid payload
    dense_bf16 = 2 * layout.numel
    return {
        "params": layout.numel,
        "bytes": len(payload),
        "ratio_bf16": dense_bf16 / len(payload),
        "ratio_fp32": 2 * dense_bf16 / len(payload),
    }


def run(preset: str = "1b", chunk: int = 64) -> list[tuple[str, dict]]:
    shapes = parameter_shapes(preset)
    return [(label, measure(shapes, chunk, k, bit, dtype)) for label, k, bit, dtype in VARIANTS]


def print_table(preset: str, chunk: int, rows: list[tuple[str, dict]]) -> None:
    params = rows[0][1]["params"]
    print(
        f"\nWire bytes per client per step, {preset} Llama ({params / 1e9:.3f}B params), chunk {chunk}"
    )
    print(f"{'variant':<28}{'payload':>14}{'vs bf16':>10}{'vs fp32':>10}")
    for label, r in rows:
        print(
            f"{label:<28}{r['bytes'] / 1e6:>11.3f} MB{r['ratio_bf16']:>9.0f}x{r['ratio_fp32']:>9.0f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="1b", help="model preset (tiny, small, 100m, 1b)")
    parser.add_argument("--chunk", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    started = time.perf_counter()
    rows = run(args.model, args.chunk)
    print_table(args.model, args.chunk, rows)
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
