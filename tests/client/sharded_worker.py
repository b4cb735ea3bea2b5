"""One rank of a 2-rank member, run by test_sharded_replica: rank 0 drives a ShardedReplica through the
Replica calls a client makes in a run that verifies results, rank 1 serves it; rank 0 writes what the test
compares (payloads, the committed states' directories and manifests, its verdicts on another trainer's
steps). An evaluation comes between the apply and the third step, as in a client (the step must train on the
rows DisTrO holds all the same); the checks come between the third step and the fourth (which must train on
the member's own weights and state, given back after each check).

usage: python sharded_worker.py <run.toml> <folder> <rank> <port>
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from cohort.client.checkpoint import CheckpointWriter
from cohort.client.distro import DistroResult, SparseTiles
from cohort.client.p2p.manifest import Manifest
from cohort.client.runtime.sharded import ShardedReplica, serve_rank
from cohort.client.verify.state import CommittedState
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

SEED = 7
CHECK_SEED = b"drawn after the member's step was decided"


def main() -> None:
    config, folder, rank, port = (
        Path(sys.argv[1]),
        Path(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
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
        batches = json.loads(
            (folder / "batches.json").read_text()
        )  # step -> [start, end): 6 sequences

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
        # a checkpoint written by rows from both ranks: the files a one-process replica writes of these weights
        info = member.checkpoint(
            CheckpointWriter(folder / "member-checkpoints"), run_id="t", step=2, epoch=0
        ).result()
        out["checkpoint"] = [str(info.path), info.manifest_hex]
        out["eval"] = member.evaluate(4).loss
        train(3)
        # the member checks the other trainer's steps on its shards, from that trainer's committed parts
        other = json.loads(
            (folder / "other.json").read_text()
        )  # step -> its state's root and manifest
        states = {int(k): CommittedState(Path(v["root"]), Manifest.decode(bytes.fromhex(v["manifest"])))
                  for k, v in other.items()}  # fmt: skip
        payloads = {step: (folder / f"other-{step}.bin").read_bytes() for step in states}
        out["checks"] = {}
        for step in (2, 3):
            before, after = states[step - 1].manifest.encode(), states[step].manifest.encode()
            wanted = member.check_parts(CHECK_SEED, before, after)
            parts = states[step - 1].read_parts(wanted) | states[step].read_parts(wanted)
            verdict = member.verify_step(step, payloads[step], payloads[step - 1], CHECK_SEED, before, parts,
                                         after, parts)  # fmt: skip
            out["checks"][step] = [verdict.passed, verdict.reason, verdict.metrics]
        result = member.codec.decode(payloads[3]).result
        flipped = member.codec.encode(DistroResult(result.step, result.batch,
                                                   tuple(SparseTiles(t.indices, -t.values) for t in result.tiles),
                                                   result.state))  # fmt: skip
        verdict = member.verify_step(
            3, flipped, payloads[2], CHECK_SEED, before, parts, after, parts
        )
        out["checks"]["flipped"] = [verdict.passed, verdict.reason, verdict.metrics]
        out["after_checks"] = member.digest()
        train(4)
        start = json.loads(
            (folder / "start-checkpoint.json").read_text()
        )  # another replica's, of other weights
        member.load(
            Path(start["path"]), bytes.fromhex(start["manifest"])
        )  # every rank reads its rows
        out["loaded"] = member.digest()
        (folder / "member.json").write_text(json.dumps(out))
        member.close()
    finally:
        dist.barrier()  # nobody tears the group down while another rank still talks
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
