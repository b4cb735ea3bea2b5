"""A 1.2B member in a real run on this machine: the `llama-1b` shape (1,204.9M parameters with a 32k vocabulary)
trained by one `cohort train --lean-memory` process on a localnet, with verification on, through an epoch and
its checkpoint.

    .venv/bin/python benchmarks/client/big_member.py [--epoch-seconds 900] [--threads 1] [--keep DIR]
        [--verification-percent 0]

Run it alone (it needs ~17 GB). Everything is the real path: a localnet process, the coordinator deployed over
RPC, a run created from a config, and `cohort train` sizing the model against the machine's memory and disk
before it loads it, then joining, building the weights, training rounds, applying, and writing the epoch's
checkpoint as the run's checkpointer. The run has one member (two of this size do not fit in 24 GB), so no
check of its steps is drawn; what a running check adds to a member's memory is measured by
`memory.py --sizes 1.2b --modes on`. With --verification-percent > 0 the member also keeps what a verified run
asks (weight snapshots and its committed states, ~5 GB each a step at this size: `cohort run create` prints the
total), and `cohort train` refuses when the disk under its checkpoint directory cannot hold it.

The data: the KJV corpus and the Python standard library's modules (every machine with Python has them, and no
network is needed), a 32,000-token byte-level BPE trained on them and the text prepared into shards with the
project's own `cohort data train-tokenizer` and `cohort data prepare`; the run reads the prepared directory.

Prints the member's steps and losses, its step and apply times, its peak resident memory (VmHWM, the whole
process: interpreter, torch and the P2P node included) in GB and in bytes per parameter, and the checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from cohort.client.runtime.local_run import LocalRun, failures, write_config
from cohort.sdk.presets import MODEL_PRESETS
from cohort.sdk.sizing import shape_of

VOCAB, SEQ = 32_000, 128
PARAMETERS = shape_of("HfLlama", MODEL_PRESETS["llama-1b"].hf_config, VOCAB, SEQ).parameters


def prepare_data(root: Path) -> Path:
    """A 32k-token BPE and the prepared shards of KJV + the standard library's modules, under `root`."""
    from cohort.client.data.corpus import load_corpus

    corpus = root / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "kjv.txt").write_text(load_corpus("kjv"))
    for module in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            (corpus / f"{module.name}.txt").write_text(module.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
    cli = [sys.executable, "-m", "cohort.sdk.cli", "data"]
    tokenizer, data = root / "tokenizer.json", root / "data"
    subprocess.run([*cli, "train-tokenizer", str(corpus), "--vocab-size", str(VOCAB), "--out", str(tokenizer)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run([*cli, "prepare", str(corpus), "--tokenizer", str(tokenizer), "--out", str(data),
                    "--vocab-size", str(VOCAB)], check=True, capture_output=True)  # fmt: skip
    return data


def _peak_rss(pid: int) -> int:
    """The process's peak resident set in bytes (VmHWM), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


async def run(epoch_seconds: int, threads: int, root: Path, verification_percent: int) -> int:
    data = prepare_data(root)
    config = write_config(
        root / "big-member.toml",
        id="big-member",
        name="llama-1b member on one machine",
        num_parameters=PARAMETERS,
        vocab_size=VOCAB,
        max_seq_len=SEQ,
        data_location=str(data),
        preset="llama-1b",
        init_min_clients=1,
        min_clients=1,
        witness_nodes=1,
        global_batch_size_start=2,  # 2 sequences of 128 tokens a step
        global_batch_size_end=2,
        warmup_time=600,  # sizing, building 1.2B weights a layer at a time, joining
        max_round_train_time=600,
        epoch_time=epoch_seconds,
        cooldown_time=600,  # the checkpointer writes 4.8 GB
        verification_percent=verification_percent,
        lr_schedule__warmup_steps=1,
        base_lr=4e-4,
        final_lr=4e-5,
    )
    run = LocalRun(config=config, root=root, checkpointers=1, trainer_args=("--lean-memory",),
                   env={"COHORT_THREADS": str(threads)}, log=print)  # fmt: skip
    started = time.monotonic()
    async with run:
        (member,) = await run.start_members(1, prefix="big")
        assert member.process is not None
        pid, peak, saved = member.process.pid, 0, None
        deadline = time.monotonic() + epoch_seconds + 600 + 120
        while time.monotonic() < deadline and member.alive:
            peak = max(peak, _peak_rss(pid))
            if saved := member.events("checkpoint_saved"):
                break
            if failed := failures(member):
                print("the member failed:", *failed, sep="\n  ")
                break
            await asyncio.sleep(2)
        peak = max(peak, _peak_rss(pid))
        trained = member.events("trained")
        applied = member.events("applied")
        model = member.events("model_loaded")
        apply_times = [e["seconds"] for e in member.events("apply_time")]
        refused = member.events("refused")
    seconds = time.monotonic() - started
    print()
    print(f"llama-1b member, {PARAMETERS / 1e6:,.1f}M parameters, --lean-memory, {threads} thread(s), "
          f"verification_percent {verification_percent}, {seconds:.0f} s in all")  # fmt: skip
    if refused:
        print("refused:", refused[-1])
    if model:
        print(f"model built: {model[0]['parameters']:,} parameters in {model[0]['seconds']:.0f} s")
    if trained:
        losses = [e["loss"] for e in trained]
        print(f"steps trained: {len(trained)} (steps {trained[0]['step']}..{trained[-1]['step']}), "
              f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")  # fmt: skip
        print(f"train step: median {statistics.median(e['seconds'] for e in trained):.1f} s")
    if apply_times:
        print(f"apply: median {statistics.median(apply_times):.1f} s over {len(applied)} steps")
    print(f"peak resident memory (VmHWM, whole process): {peak / 1e9:.2f} GB = "
          f"{peak / PARAMETERS:.1f} B/param")  # fmt: skip
    if saved:
        print("checkpoint saved:", {k: v for k, v in saved[-1].items() if k != "t"})
        return 0
    print("no checkpoint was saved: see", root)
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epoch-seconds", type=int, default=900, help="the epoch, warmup included")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the member")
    parser.add_argument(
        "--verification-percent",
        type=int,
        default=0,
        help="the run's verification_percent (0..100)",
    )
    parser.add_argument(
        "--keep", type=Path, help="keep the run's files here (default: a temporary directory)"
    )
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        sys.exit(
            asyncio.run(run(args.epoch_seconds, args.threads, args.keep, args.verification_percent))
        )
    with tempfile.TemporaryDirectory(prefix="cohort-big-member-") as tmp:
        sys.exit(
            asyncio.run(run(args.epoch_seconds, args.threads, Path(tmp), args.verification_percent))
        )


if __name__ == "__main__":
    main()
