"""How long a verifier's own step waits for its model worker behind the replays of its checks: replays as
own jobs (the worker's old single FIFO queue) against replays as background jobs (runtime/worker.py: our
own jobs first, a running job never interrupted, a starvation guard after PATIENCE own jobs).

    .venv/bin/python benchmarks/client/check_priority.py [--replays 2] [--seq 64] [--batch 8] [--repeat 3]

Real replicas of one run (the demo config, llama-tiny, CPU): a trainer trains steps 1-3, a verifier trains
its own alongside (both apply, as members do), then on the verifier's worker, while an apply of ours runs,
`--replays` checks of the trainer's step 3 are asked, and then our next own train. The table gives the own
train's wait (asked to started) and the replays' own seconds; every replay's verdict must pass, also when
it runs after our later train and apply (it replays from the weights kept on disk for its step and gives
our model and optimizer back bit for bit, so where the worker puts it does not change what it finds).

The bound with background replays: an own job waits for at most one replay, the one already running. The
second scenario ("replay running") asks the train while a replay runs: the train waits for the rest of it
in both modes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

from cohort.client.runtime.effects import Timed
from cohort.client.runtime.local_run import write_config
from cohort.client.runtime.trainer import LocalReplica
from cohort.client.runtime.worker import ModelWorker
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

SEED = b"a check seed"


def replicas(folder: Path, seq: int, batch: int) -> tuple[LocalReplica, LocalReplica, list, list]:
    """A trainer and a verifier after steps 1-3 in lock step: (trainer, verifier, the trainer's (payload,
    manifest, parts) per step, the verifier's payloads per step)."""
    run_file = load_run_file(write_config(folder / "run.toml", max_seq_len=seq), CoordinatorCore())
    spec = training_spec(run_file.metadata, run_file.model)
    trainer = LocalReplica(spec, seed=7, scratch=folder / "trainer")
    verifier = LocalReplica(spec, seed=7, scratch=folder / "verifier")
    for replica in (trainer, verifier):
        replica.start_epoch(1, cold=False, verified=True)
    theirs, mine = [], []
    for step in (1, 2, 3):
        if step >= 3:  # step s trains on the weights after step s - 2's results
            for replica in (trainer, verifier):
                replica.apply(step - 2, [theirs[step - 3][0], mine[step - 3]])
        out = trainer.train(step, batch * step, batch * step + batch)
        own = verifier.train(step, 1000 + batch * step, 1000 + batch * step + batch)
        parts = out.state.read_parts()
        assert all(hashlib.sha256(p).digest() == h for h, p in parts.items())
        theirs.append((out.payload, out.state.manifest.encode(), parts))
        mine.append(own.payload)
    return trainer, verifier, theirs, mine


async def scenario(worker: ModelWorker, verifier: LocalReplica, theirs: list, mine: list, *, replays: int,
                   background: bool, running: bool, batch: int) -> tuple[float, list[float]]:  # fmt: skip
    """The own train's wait and the replays' seconds. `running`: the train is asked while the first replay
    runs (else while an apply of ours runs, with every replay queued before the train)."""
    (previous, before, before_parts), (published, after, after_parts) = theirs[1], theirs[2]
    ask = worker.run_background if background else worker.run
    jobs = [Timed(verifier.verify_step) for _ in range(replays)]
    args = (3, published, previous, SEED, before, before_parts, after, after_parts)
    pending = []
    if (
        not running
    ):  # one of our applies holds the worker (applying the same step again: as long as one)
        pending.append(
            asyncio.ensure_future(worker.run(verifier.apply, 2, [theirs[1][0], mine[1]]))
        )
    pending += [asyncio.ensure_future(ask(job, *args)) for job in jobs]
    await asyncio.sleep(0)
    if running:
        while jobs[0].seconds == 0 and jobs[0].waited == 0:  # the first replay has started
            await asyncio.sleep(0.001)
    train = Timed(verifier.train)
    await worker.run_abortable(train, 4, 2000, 2000 + batch)
    verdicts = await asyncio.gather(*pending)
    for verdict in verdicts[-replays:]:
        assert verdict is not None and verdict.passed, verdict  # wherever the worker put it
    return train.waited, [job.seconds for job in jobs]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=2, help="checks asked before our train")
    parser.add_argument("--seq", type=int, default=64, help="sequence length")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each scenario (the median kept)"
    )
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cohort-check-priority-") as tmp:
        _, verifier, theirs, mine = replicas(Path(tmp), a.seq, a.batch)
        worker = ModelWorker()
        rows = []
        for running in (False, True):
            for background in (False, True):
                waits, replay_seconds = [], []
                for _ in range(a.repeat):
                    waited, seconds = await scenario(worker, verifier, theirs, mine, replays=a.replays,
                                                     background=background, running=running,
                                                     batch=a.batch)  # fmt: skip
                    waits.append(waited)
                    replay_seconds += seconds
                rows.append((("replay running" if running else "apply running, replays queued"),
                             "background" if background else "FIFO (before)",
                             statistics.median(waits), statistics.median(replay_seconds)))  # fmt: skip
        worker.close()
    print(
        f"{a.replays} replay(s) of one step ({a.batch} x {a.seq} tokens, llama-tiny, CPU), then our train"
    )
    print(f"{'scenario':<32} {'replays as':<16} {'own train waited s':>19} {'one replay s':>13}")
    for scene, mode, wait, replay in rows:
        print(f"{scene:<32} {mode:<16} {wait:>19.3f} {replay:>13.3f}")


if __name__ == "__main__":
    started = time.perf_counter()
    asyncio.run(main())
    print(f"({time.perf_counter() - started:.1f} s in all)")
