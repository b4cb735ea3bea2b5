"""One rank of a member that spans processes, run by test_shards: DisTrO on this rank's rows of a tiny
Llama (gloo over 127.0.0.1), fed the same gradients a one-process replica got; writes the member's
assembled payloads and the digest of its weights after the applies.

usage: python shard_worker.py <folder> <rank> <world> <port> <steps>
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from cohort.client.distro import BatchId, Constant, DistroConfig, DistroOptimizer
from cohort.client.distro.shards import assemble, local_results, plan_shard
from cohort.client.model import build_model, llama_config, parameter_digest

# chunk 16: a tiny Llama's dims (128, 384, 256) cut in two keep whole 16-row bands
CONFIG = DistroConfig(compression_chunk=16, compression_topk=8, clip_grad_norm=1.0)
LR = Constant(1e-3)


def grads_of(model: torch.nn.Module, step: int) -> list[torch.Tensor]:
    """The whole model's stand-in gradients of `step` (the same in every process)."""
    generator = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(p.shape, generator=generator) * 0.05 for p in model.parameters()]


def main() -> None:
    folder, rank, world, port, steps = Path(sys.argv[1]), *map(int, sys.argv[2:])
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        full = build_model(llama_config("tiny"), seed=0)
        names = [n for n, _ in full.named_parameters()]
        probe = DistroOptimizer(full.named_parameters(), CONFIG, LR)
        plans = [plan_shard(probe.layout, r, world) for r in range(world)]
        plan = plans[rank]
        local = [
            torch.nn.Parameter(plan.local_tensor(i, p.detach()).clone())
            for i, p in enumerate(full.parameters())
        ]

        def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
            dist.all_reduce(t)
            return t

        optimizer = DistroOptimizer(zip(names, local, strict=True), CONFIG, LR, layout=plan.local,
                                    all_reduce_sum=all_reduce_sum)  # fmt: skip
        for step in range(steps):
            optimizer.lookahead(step)
            for i, (p, g) in enumerate(zip(local, grads_of(full, step), strict=True)):
                p.grad = plan.local_tensor(i, g).clone()
            mine = optimizer.generate(step, BatchId(step, step + 1))
            parts = [None] * world
            dist.all_gather_object(parts, mine)
            if rank == 0:
                payload = probe.codec.encode(assemble(plans, parts))
                (folder / f"member-{step}.bin").write_bytes(payload)
            dist.barrier()
            # every rank applies the decided list (the one-process replica's payloads, as a run decides it)
            decided = [
                probe.codec.decode((folder / f"{name}-{step}.bin").read_bytes())
                for name in ("ref", "other")
            ]
            optimizer.apply(step, local_results(plan, decided))
        gathered = [None] * world
        dist.all_gather_object(gathered, [p.detach() for p in local])
        if rank == 0:
            with torch.no_grad():
                for i, p in enumerate(full.parameters()):
                    p.copy_(torch.cat([rows[i] for rows in gathered]))
            (folder / "member.digest").write_text(parameter_digest(full))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
