"""One rank of a 2-rank member, run by test_sharded_replica: rank 0 drives a ShardedReplica through the
Replica calls a client makes in a run that verifies results, rank 1 serves it; rank 0 writes what the test
compares (payloads, the committed states' directories and manifests). An evaluation comes between the apply
and the last step, as in a client (the step must train on the rows DisTrO holds all the same).

usage: python sharded_worker.py <run.toml> <folder> <rank> <port>
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from cohort.client.runtime.sharded import ShardedReplica, serve_rank
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

SEED = 7


def main() -> None:
    config, folder, rank, port = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    run_file = load_run_file(config, CoordinatorCore())
    spec = training_spec(run_file.metadata, run_file.model)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        if rank != 0:
            serve_rank(spec, seed=SEED, micro_batch_size=2)
            return
        member = ShardedReplica(spec, seed=SEED, micro_batch_size=2, scratch=folder / "scratch")
        out: dict = {"start": member.digest(), "states": {}, "loss": {}}
        batches = json.loads((folder / "batches.json").read_text())  # step -> [start, end): 6 sequences


        def train(step: int) -> None:  # 3 sequences a rank, in micro-batches of 2
            trained = member.train(step, *batches[str(step)])
            (folder / f"member-{step}.bin").write_bytes(trained.payload)
            out["loss"][step] = trained.loss
            state = trained.state
            out["states"][step] = {"root": str(state.root), "manifest": state.manifest.encode().hex(),
                                   "commitment": state.commitment.hex(),
                                   "header": member.check(trained.payload).state.hex()}  # fmt: skip

        member.start_epoch(1, cold=False, verified=True)
        train(1)
        train(2)
        decided = [(folder / name).read_bytes() for name in ("ref-1.bin", "other-1.bin")]
        member.apply(1, decided)  # step 3 trains on the weights after step 1's results
        out["applied"], out["checksum"] = member.digest(), member.checksum()
        out["eval"] = member.evaluate(4).loss
        train(3)
        (folder / "member.json").write_text(json.dumps(out))
        member.close()
    finally:
        dist.barrier()  # nobody tears the group down while another rank still talks
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
