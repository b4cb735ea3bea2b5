"""What one member holds, in bytes per parameter: peak resident memory above the process's import baseline,
divided by the model's parameter count, for the member's own replica code path (`LocalReplica`: train with
lookahead, forward/backward, DisTrO generate and encode; apply of 4 results; with verification: the
weight snapshots and committed states a member keeps, and one real check replayed).

    .venv/bin/python benchmarks/client/memory.py                   # ~10M, ~100M, ~400M (minutes)
    .venv/bin/python benchmarks/client/memory.py --sizes 1.2b      # the llama-1b shape (run alone: ~20 GB)
    .venv/bin/python benchmarks/client/memory.py --lean-memory     # cohort train --lean-memory's member
    .venv/bin/python benchmarks/client/memory.py --ranks 2 --modes off   # a member sharded over 2 processes

Each size and mode runs in a fresh process (so peaks do not mix); phases are measured with the kernel's
peak counter (VmHWM), reset between phases through /proc/self/clear_refs. Random tokens over a 32k
vocabulary, 256 tokens a step (one sequence), the example run's DisTrO settings (chunk 64, top-32, 1-bit).
The algorithm itself needs 12 B/param (fp32 weights, gradients, momentum).

With --ranks N > 1 the member is a `ShardedReplica` (FSDP2 over N gloo ranks on this machine, a fresh
process a rank; "on": it commits its state every step and checks a step on its shards). Rank 0 drives the same phases;
every rank measures its own peaks, each printed in bytes per parameter of the *whole* model (an ideal split
of 12 B/param over 2 ranks shows ~6 a rank). A rank other than 0 runs `serve_rank` and sees no phases, only
the ops rank 0 broadcasts (the benchmark listens on torch.distributed.broadcast_object_list): its build is
everything up to the end of the first op (joining the group, building its rows), and each later op's peak
covers the wait for it and the op itself (an op whose name it cannot read counts as "rest").
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

SHAPES = {  # name: (hidden, layers, heads, intermediate, tied)
    "10m": (256, 4, 4, 768, True),
    "100m": (768, 12, 12, 2048, True),
    "400m": (1024, 24, 16, 3072, True),
    "1.2b": (2048, 16, 16, 8192, False),
}
VOCAB, SEQ = 32_000, 256
RESULTS = 4  # applied per step, ours among them
STEPS = 4


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def use_random_tokens(vocab: int = VOCAB, modules: tuple = ()) -> None:
    """Feed replicas random tokens over `vocab`: patched in for the trainer module's `open_dataset` (and that of
    every module in `modules` that imported it into its own namespace)."""
    import torch

    from cohort.client.data import BatchId
    from cohort.client.runtime import trainer as trainer_module

    class RandomTokens:
        seq_len, vocab_size, split, num_sequences = SEQ, vocab, "train", 1 << 30

        def sequences(self, batch: BatchId) -> torch.Tensor:
            g = torch.Generator().manual_seed(batch.start)
            return torch.randint(0, vocab, (len(batch), SEQ), generator=g)

        def close(self) -> None:
            pass

    for module in (trainer_module, *modules):
        module.open_dataset = lambda spec, split="train": RandomTokens()


def bench_spec(name: str, hidden: int, layers: int, heads: int, inter: int, tied: bool, *,
               kv_heads: int | None = None, vocab: int = VOCAB):  # fmt: skip
    """A Llama of this shape with the example run's DisTrO settings (chunk 64, top-32, 1-bit), SEQ tokens."""
    from cohort.sdk.presets import DistroSpec, LrSpec, TrainingSpec

    return TrainingSpec(
        preset=name, architecture="HfLlama",
        hf_config={"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
                   "num_key_value_heads": kv_heads or heads, "intermediate_size": inter,
                   "tie_word_embeddings": tied, "rms_norm_eps": 1e-5},
        vocab_size=vocab, max_seq_len=SEQ, data_location="random", cold_start_warmup_steps=0,
        distro=DistroSpec(compression_decay=0.999, compression_chunk=64, compression_topk=32, weight_decay=0.0,
                          clip_grad_norm=1.0, quantize_1bit=True),
        lr=LrSpec("Constant", 4e-4, 4e-4, 0, 0, 1000),
    )  # fmt: skip


def _setup(size: str, modules: tuple = ()):
    """The bench spec of `size`, its replicas fed random tokens."""
    use_random_tokens(VOCAB, modules)
    return bench_spec(f"bench-{size}", *SHAPES[size])


def child(size: str, verified: bool, lean: bool = False) -> dict:
    import torch

    from cohort.client.data import BatchId
    from cohort.client.runtime import trainer as trainer_module
    from cohort.client.verify.sample import PartsOnDisk

    torch.manual_seed(0)
    torch.set_num_threads(2)
    spec = _setup(size)
    baseline = _status("VmRSS")
    phases: dict[str, float] = {}
    seconds: dict[str, float] = {}

    def phase(name: str, job, *args, **kwargs):
        _reset_peak()
        started = time.perf_counter()
        out = job(*args, **kwargs)
        seconds[name] = max(seconds.get(name, 0.0), time.perf_counter() - started)
        phases[name] = max(phases.get(name, 0.0), float(_status("VmHWM") - baseline))
        return out

    if lean:  # what `cohort train --lean-memory` does before it builds its replica
        from cohort.client.runtime.memory import return_freed_memory

        return_freed_memory()
    replica = phase(
        "build", trainer_module.LocalReplica, spec, seed=1, activation_checkpointing=lean
    )
    params = sum(p.numel() for p in replica.model.parameters())
    replica.start_epoch(0, cold=False, verified=verified)
    states: dict[
        int, object
    ] = {}  # our committed states: on disk, where the blob store serves them from
    payloads: dict[int, bytes] = {}

    for step in range(STEPS):
        out = phase("train", replica.train, step, step, step + 1)
        payloads[step] = out.payload
        states[step] = out.state
        result = replica.codec.decode(out.payload).result
        others = [
            replica.codec.encode(replace(result, batch=BatchId(100 + i, 101 + i)))
            for i in range(RESULTS - 1)
        ]
        phase("apply", replica.apply, step, [out.payload, *others])
    if verified:
        s = STEPS - 1
        # what a verifier fetches, kept on disk as the runtime keeps it: the sign plane and the sampled parts
        seed = b"a check seed"
        manifests = [states[s - 1].manifest.encode(), states[s].manifest.encode()]
        wanted = set(replica.check_parts(seed, *manifests))
        fetched = PartsOnDisk(replica.scratch / "check.parts")
        for h, part in (states[s - 1].read_parts(wanted) | states[s].read_parts(wanted)).items():
            fetched.add(h, part)
        verdict = phase("check", replica.verify_step, s, payloads[s], payloads[s - 1], seed, manifests[0], fetched,
                        manifests[1], fetched)  # fmt: skip
        fetched.close()
        assert verdict is not None and verdict.passed, verdict
    return {"size": size, "params": params, "verified": verified,
            "bytes_per_param": {k: v / params for k, v in phases.items()}, "seconds": seconds}  # fmt: skip


def rank_child(
    size: str,
    rank: int,
    world: int,
    port: int,
    timeout: float,
    verified: bool = False,
    lean: bool = False,
) -> dict:
    """One rank of a member sharded over `world` processes: its peaks (bytes above its import baseline) and
    seconds, per phase (rank 0) or per op heard (the others); rank 0 adds the whole model's parameter count."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from cohort.client.data import BatchId
    from cohort.client.runtime import sharded

    torch.manual_seed(0)
    torch.set_num_threads(max(1, 2 // world))  # the one-process child's 2 threads, shared
    spec = _setup(size, (sharded,))
    baseline = _status("VmRSS")
    phases: dict[str, float] = {}
    seconds: dict[str, float] = {}

    def peak(name: str, started: float) -> None:
        seconds[name] = max(seconds.get(name, 0.0), time.perf_counter() - started)
        phases[name] = max(phases.get(name, 0.0), float(_status("VmHWM") - baseline))

    def phase(name: str, job, *args, **kwargs):
        _reset_peak()
        started = time.perf_counter()
        out = job(*args, **kwargs)
        peak(name, started)
        return out

    if lean:  # what `cohort train --lean-memory` does on every rank before it builds
        from cohort.client.runtime.memory import return_freed_memory

        return_freed_memory()
    _reset_peak()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout))  # fmt: skip
    params = None
    try:
        if rank == 0:
            member = phase("build", sharded.ShardedReplica, spec, seed=1, device="cpu")
            params = sum(
                p.numel() for p in member.model.parameters()
            )  # the whole model (a meta view)
            member.start_epoch(0, cold=False, verified=verified)
            states, payloads = {}, {}
            for step in range(STEPS):
                out = phase("train", member.train, step, step, step + 1)
                states[step], payloads[step] = out.state, out.payload
                result = member.codec.decode(out.payload).result
                others = [
                    member.codec.encode(replace(result, batch=BatchId(100 + i, 101 + i)))
                    for i in range(RESULTS - 1)
                ]
                phase("apply", member.apply, step, [out.payload, *others])
            if (
                verified
            ):  # one real check on the ranks' shards, from parts on disk as the runtime keeps them
                from cohort.client.verify.sample import PartsOnDisk

                s, seed = STEPS - 1, b"a check seed"
                manifests = [states[s - 1].manifest.encode(), states[s].manifest.encode()]
                wanted = set(member.check_parts(seed, *manifests))
                fetched = PartsOnDisk(member.scratch / "check.parts")
                for h, part in (
                    states[s - 1].read_parts(wanted) | states[s].read_parts(wanted)
                ).items():
                    fetched.add(h, part)
                verdict = phase("check", member.verify_step, s, payloads[s], payloads[s - 1], seed, manifests[0],
                                fetched, manifests[1], fetched)  # fmt: skip
                fetched.close()
                assert verdict is not None and verdict.passed, verdict
            member.close()
        else:
            # serve_rank shows no phases: listen to the ops it hears. Between two entries into the broadcast
            # lies the wait for an op and the op itself; the first op (the run, then its rows) is the build.
            heard, current, started = 0, "build", time.perf_counter()
            broadcast = dist.broadcast_object_list

            def listening(object_list, *args, **kwargs):
                nonlocal heard, current, started
                peak(current, started)
                _reset_peak()
                started = time.perf_counter()
                out = broadcast(object_list, *args, **kwargs)
                said = object_list[0]
                op = said[0] if isinstance(said, tuple) and said else None
                current = "build" if heard == 0 else op if isinstance(op, str) else "rest"
                heard += 1
                return out

            dist.broadcast_object_list = listening
            try:
                sharded.serve_rank(spec, seed=1)
            finally:
                dist.broadcast_object_list = broadcast
            peak(current, started)
        dist.barrier()  # nobody tears the group down while another rank still talks (a failed rank just exits)
    finally:
        dist.destroy_process_group()
    return {
        "size": size,
        "rank": rank,
        "world": world,
        "params": params,
        "bytes": phases,
        "seconds": seconds,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    size: str, world: int, timeout: float, verified: bool = False, lean: bool = False
) -> list[dict]:
    """Start the `world` ranks of a member, each a fresh process, and collect what each measured; any rank's
    failure or the timeout ends them all."""
    port, deadline = _free_port(), time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="memory-ranks-") as folder:
        logs = [(Path(folder) / f"{r}.out", Path(folder) / f"{r}.err") for r in range(world)]
        ranks: list[subprocess.Popen] = []
        try:
            for r, (out, err) in enumerate(logs):
                with out.open("w") as o, err.open("w") as e:
                    ranks.append(subprocess.Popen(
                        [sys.executable, __file__, "--rank-child", size, str(r), str(world), str(port),
                         "--timeout", str(timeout), "--modes", "on" if verified else "off",
                         *(["--lean-memory"] if lean else [])], stdout=o, stderr=e, text=True))  # fmt: skip
            while any(rank.poll() is None for rank in ranks):
                failed = [r for r, rank in enumerate(ranks) if rank.returncode not in (None, 0)]
                if failed:
                    last = logs[failed[0]][1].read_text().strip().splitlines()[-1:]
                    raise RuntimeError(
                        f"rank {failed[0]} exited with {ranks[failed[0]].returncode}: {last}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"timed out after {timeout:.0f} s")
                time.sleep(0.2)
            for r, rank in enumerate(ranks):
                if rank.returncode != 0:
                    last = logs[r][1].read_text().strip().splitlines()[-1:]
                    raise RuntimeError(f"rank {r} exited with {rank.returncode}: {last}")
            return [json.loads(out.read_text().strip().splitlines()[-1]) for out, _ in logs]
        finally:
            for rank in ranks:
                if rank.poll() is None:
                    rank.kill()
                    rank.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", nargs="+", default=["10m", "100m", "400m"], choices=sorted(SHAPES)
    )
    parser.add_argument("--modes", nargs="+", default=["off", "on"], choices=["off", "on"])
    parser.add_argument(
        "--lean-memory",
        action="store_true",
        help="as `cohort train --lean-memory`: activations recomputed in the backward, freed memory "
        "given back at once",
    )
    parser.add_argument(
        "--ranks",
        type=int,
        default=1,
        metavar="N",
        help="processes the member spans (N > 1: a ShardedReplica over N gloo ranks)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="with --ranks N > 1: how long a size's ranks may run before they are ended",
    )
    parser.add_argument("--child", nargs=2, metavar=("SIZE", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--rank-child", nargs=4, metavar=("SIZE", "RANK", "WORLD", "PORT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1] == "on", args.lean_memory)))
        return
    if args.rank_child:
        size, rank, world, port = args.rank_child
        print(
            json.dumps(
                rank_child(
                    size,
                    int(rank),
                    int(world),
                    int(port),
                    args.timeout,
                    args.modes == ["on"],
                    args.lean_memory,
                )
            )
        )
        return
    if args.ranks < 1:
        parser.error("--ranks must be at least 1")
    if args.ranks > 1:
        sharded_table(args)
        return
    print(f"{'model':>6} {'params':>13} {'verif.':>6} | {'train':>6} {'apply':>6} {'check':>6} | peak B/param "
          f"(above imports) | train s  apply s  check s")  # fmt: skip
    for size in args.sizes:
        for mode in args.modes:
            flags = ["--lean-memory"] if args.lean_memory else []
            run = subprocess.run(
                [sys.executable, __file__, "--child", size, mode, *flags],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                print(f"{size:>6} {mode:>6}: failed: {run.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(run.stdout.strip().splitlines()[-1])
            b, t = r["bytes_per_param"], r["seconds"]
            print(f"{size:>6} {r['params']:>13,} {mode:>6} | {b['train']:6.1f} {b['apply']:6.1f} "
                  f"{b.get('check', float('nan')):6.1f} | peak {max(b.values()):5.1f} | "
                  f"{t['train']:7.2f} {t['apply']:8.2f} {t.get('check', float('nan')):8.2f}", flush=True)  # fmt: skip


def sharded_table(args: argparse.Namespace) -> None:
    """The member over args.ranks processes: one row a rank, in bytes per parameter of the whole model. A rank
    other than 0 names its peaks by the ops it heard: its train is `train` and `send_momentum` (its rows of
    the committed state), its check is `replay`."""
    nan = float("nan")
    print(f"{'model':>6} {'params':>13} {'verif.':>6} {'ranks':>5} {'':6} | {'build':>6} {'train':>6} "
          f"{'apply':>6} {'check':>6} | peak B/param of the whole model (above imports) | train s  apply s  "
          f"check s")  # fmt: skip
    for size in args.sizes:
        for mode in args.modes:
            try:
                ranks = run_ranks(size, args.ranks, args.timeout, mode == "on", args.lean_memory)
            except RuntimeError as e:
                print(f"{size:>6} {mode:>6} {args.ranks:>5}: failed: {e}", flush=True)
                continue
            params = ranks[0]["params"]
            for r in ranks:
                b = {k: v / params for k, v in r["bytes"].items()}
                t = r["seconds"]
                train = max(b.get("train", nan), b.get("send_momentum", 0.0))
                check = b.get("check", b.get("replay", nan))
                seconds = t.get("check", t.get("replay", nan))
                print(f"{size:>6} {params:>13,} {mode:>6} {args.ranks:>5} rank {r['rank']:<1} | "
                      f"{b.get('build', nan):6.1f} {train:6.1f} {b.get('apply', nan):6.1f} {check:6.1f} | "
                      f"peak {max(b.values()):5.1f} | {t.get('train', nan):7.2f} {t.get('apply', nan):8.2f} "
                      f"{seconds:8.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
