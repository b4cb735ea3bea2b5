"""Run as a separate process by test_process_determinism: apply saved payloads, print a digest.

usage: python apply_worker.py <payload dir> <comma-separated file order> <torch threads>
"""

import sys
from pathlib import Path

import torch

from cohort.client.distro import Constant, DistroConfig, DistroOptimizer
from cohort.client.model import build_model, llama_config, parameter_digest

# 4 peers x top-4 on 32x32 tiles: the term-by-term inverse DCT; vectors: the dense one
CONFIG = DistroConfig(compression_chunk=32, compression_topk=4)
LR = Constant(1e-3)


def apply_saved(model: torch.nn.Module, folder: Path, order: list[str]) -> str:
    optimizer = DistroOptimizer(model.named_parameters(), CONFIG, LR)
    for round_ in ("round0", "round1"):
        payloads = [(folder / round_ / name).read_bytes() for name in order]
        optimizer.apply(2, [optimizer.codec.decode(p) for p in payloads])
    return parameter_digest(model)


if __name__ == "__main__":
    folder, order, threads = Path(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
    torch.set_num_threads(threads)
    print(apply_saved(build_model(llama_config("tiny"), seed=0), folder, order))
