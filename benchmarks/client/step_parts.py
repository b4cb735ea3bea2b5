"""Where a member's step goes, as multiples of its forward/backward: lookahead, generate (clip, error
feedback, DCT, top-k), encode, apply of 4 results, the per-round checksum, the weights digest (sha256 of every
weight, once an epoch) and the state commitment (written to disk and hashed) when the run verifies.

    .venv/bin/python benchmarks/client/step_parts.py                       # 100M and 400M, 8 x 256 tokens
    .venv/bin/python benchmarks/client/step_parts.py --sizes 400m --sequences 16

The member's own pieces (DistroOptimizer, training.train_step's forward/backward, write_state) on the shapes
of benchmarks/client/memory.py, random tokens over a 32k vocabulary, the example run's DisTrO settings.
Minimum over the timed steps (the first is a warm-up); run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from memory import SEQ, SHAPES, VOCAB
from transformers import LlamaConfig, LlamaForCausalLM

from cohort.client.distro import BatchId, Constant, DistroConfig, DistroOptimizer
from cohort.client.model import lm_loss, parameter_digest, weights_checksum
from cohort.client.verify.state import write_state


def measure(size: str, sequences: int, steps: int) -> dict[str, float]:
    hidden, layers, heads, inter, tied = SHAPES[size]
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=heads, intermediate_size=inter, tie_word_embeddings=tied,
                         max_position_embeddings=SEQ, attn_implementation="sdpa")  # fmt: skip
    model = LlamaForCausalLM(config).train()
    optimizer = DistroOptimizer(model.named_parameters(), DistroConfig(compression_chunk=64, compression_topk=32),
                                Constant(4e-4))  # fmt: skip
    best: dict[str, float] = {}

    def timed(name: str, job, *args):
        started = time.perf_counter()
        out = job(*args)
        if step > 0:
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - started)
        return out

    def forward_backward(tokens: torch.Tensor) -> None:
        lm_loss(model, tokens).backward()

    with tempfile.TemporaryDirectory() as scratch:
        for step in range(steps + 1):
            tokens = torch.randint(0, VOCAB, (sequences, SEQ))
            timed("lookahead", optimizer.lookahead, step)
            timed("forward/backward", forward_backward, tokens)
            result = timed("generate", optimizer.generate, step, BatchId(step, step + 1))
            model.zero_grad(set_to_none=True)
            payload = timed("encode", optimizer.codec.encode, result)
            others = [
                optimizer.codec.encode(replace(result, batch=BatchId(100 + i, 101 + i)))
                for i in range(3)
            ]
            received = [optimizer.codec.decode(p) for p in (payload, *others)]
            timed("apply (4 results)", optimizer.apply, step, received)
            timed("checksum", weights_checksum, model)
            timed("digest", parameter_digest, model)
            timed("state commitment", write_state, optimizer, step, Path(scratch) / "state.bin")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="+", default=["100m", "400m"], choices=sorted(SHAPES))
    parser.add_argument("--sequences", type=int, default=8, help="sequences of 256 tokens a step")
    parser.add_argument("--steps", type=int, default=2, help="timed steps (after one warm-up)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    for size in args.sizes:
        t = measure(size, args.sequences, args.steps)
        fb = t["forward/backward"]
        print(f"{size}, {args.sequences} x {SEQ} tokens a step: forward/backward {fb:.2f} s")
        for name, seconds in t.items():
            print(f"  {name:<20} {seconds:8.3f} s  {seconds / fb:6.2f} x")
        overhead = t["generate"] + t["apply (4 results)"] + t["state commitment"]
        print(
            f"  generate + apply + commitment: {overhead / fb:.2f} x forward/backward", flush=True
        )


if __name__ == "__main__":
    main()
