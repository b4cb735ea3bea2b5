"""Three `cohort train` processes train a tiny Llama together on a real localnet, over real P2P sockets,
starting from the run's Hub checkpoint (a local directory, verified against the hash on chain): loss falls,
replicas stay bit-identical, every step applies every trainer's result, every round is decided on chain by
a majority of its seats, points are credited, and the clients survive a cut websocket (the localnet
restarted on its ledger) by polling. All three share one HOME and its default checkpoint directories, and
nothing goes wrong in this fault-free run: no client leaves an epoch, fails a task, refuses a result or
prints a traceback. The first client is the run's checkpointer with `--hub-repo` (a local Hub stand-in) and
`--metrics`/`--metrics-port`: each epoch's checkpoint reaches the Hub and the chain's record, and its metrics
reach TensorBoard files and an OpenMetrics endpoint."""

from __future__ import annotations

import signal
import statistics
import urllib.request
from pathlib import Path

import pytest
from support.hub_standin import HubStandIn
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cohort.client.checkpoint import save_checkpoint
from cohort.client.runtime.local_run import LocalRun, failures
from cohort.client.runtime.trainer import LocalReplica
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.models import RunState
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file

pytestmark = pytest.mark.slow
ROUNDS = (RunState.RoundTrain, RunState.RoundWitness)


async def witnessed_steps(lr: LocalRun) -> tuple[dict[int, int], list[float]]:
    """Step -> WitnessSubmitted events on chain (from the run's transaction logs), and the held-out losses
    the witnesses reported."""
    run = await lr.state()
    counts: dict[int, int] = {}
    evals: list[float] = []
    before = None
    for _ in range(50):  # pages of 1,000 signatures, newest first
        page = await lr.rpc.call("getSignaturesForAddress",
                                 lambda c, b=before: c.get_signatures_for_address(run.address, before=b, limit=1000))  # fmt: skip
        for entry in page.value:
            if entry.err is not None:
                continue
            for name, event in lr.core.idl.events_in_logs(
                await lr.rpc.transaction_logs(entry.signature), lr.program_id
            ):
                if name == "WitnessSubmitted":
                    counts[event["step"]] = counts.get(event["step"], 0) + 1
                    if event["metadata"]["eval_tokens"]:
                        evals.append(event["metadata"]["eval_loss"])
        if len(page.value) < 1000:
            return counts, evals
        before = page.value[-1].signature
    return counts, evals


def starting_checkpoint(config: Path, root: Path) -> tuple[Path, str]:
    """A checkpoint for the run to start from (a local directory named as its Hub repo, with its hash)."""
    run_file = load_run_file(config, CoordinatorCore())
    trainer = LocalReplica(training_spec(run_file.metadata, run_file.model), seed=1234)
    info = save_checkpoint(trainer.model, root, run_id=run_file.run_id, step=0, epoch=0)
    text = (
        config.read_text()
        .replace('kind = "Dummy"', 'kind = "Hub"')
        .replace(
            'repo = "demo"', f'repo = "{info.path}"\nweights_sha256 = "{info.manifest_hash.hex()}"'
        )
    )
    config.write_text(text)
    return config, trainer.digest()


async def test_three_clients_train_two_epochs_and_ride_out_a_cut_websocket(
    ci_config: Path, tmp_path: Path
):
    config, start_digest = starting_checkpoint(ci_config, tmp_path / "start")
    home = tmp_path / "home"  # one user: the clients' default checkpoint directories live under it
    hub = (
        HubStandIn()
    )  # the first member is the run's checkpointer: it uploads there, with metrics on
    env = {"HOME": str(home), "XDG_CACHE_HOME": "", "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_test",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # fmt: skip
    checkpointer = (
        "--hub-repo",
        "me/run",
        "--metrics",
        str(tmp_path / "metrics"),
        "--metrics-port",
        "0",
    )
    with hub:
        async with LocalRun(config=config, root=tmp_path / "run", env=env, checkpointers=1) as lr:
            trainers = await lr.start_members(
                3, options=lambda i: {"extra": checkpointer} if i == 0 else {}
            )
            await _train_and_check(lr, trainers, start_digest, home, hub, tmp_path / "metrics")


async def _train_and_check(lr: LocalRun, trainers: list, start_digest: str, home: Path, hub: HubStandIn,
                           metrics: Path) -> None:  # fmt: skip
    await lr.wait_for(lambda r: r.progress.epoch >= 2, 150, "two epochs")
    # the websocket is cut: the localnet restarts on its ledger while the third epoch runs
    cut = await lr.wait_for(
        lambda r: r.progress.epoch == 2 and r.state in ROUNDS, 60, "epoch 2's rounds"
    )
    await lr.restart_localnet(down_for=1.0)
    run = await lr.wait_for(lambda r: r.progress.epoch >= 3, 90, "a third epoch after the restart")

    assert all(t.alive for t in trainers), [
        t.log_path.read_text()[-2000:] for t in trainers if not t.alive
    ]
    assert not [f for t in trainers for f in failures(t)], [
        f for t in trainers for f in failures(t)
    ]
    # the run started from its Hub checkpoint (verified against the hash in the run's config)
    assert all([e["digest"] for e in t.events("checkpoint_loaded") if e["epoch"] == 0] == [start_digest]
               for t in trainers), [t.events("no_weights") for t in trainers]  # fmt: skip
    assert (
        len({d for t in trainers for d in (home / ".cache" / "cohort" / "checkpoints").glob("*/*")})
        == 3
    )
    # every replica ends every epoch with the same weights
    for epoch in range(3):
        digests = {
            t.name: [e["digest"] for e in t.events("epoch_end") if e["epoch"] == epoch]
            for t in trainers
        }
        assert all(len(d) == 1 for d in digests.values()), digests
        assert len({d[0] for d in digests.values()}) == 1, digests
    # the loss falls: the last rounds of the second epoch against the first rounds of the first
    losses = sorted((e["step"], e["loss"]) for t in trainers for e in t.events("trained"))
    steps = sorted({s for s, _ in losses})
    first = statistics.mean(loss for s, loss in losses if s in steps[:3])
    epoch_1 = [e["step"] for e in trainers[0].events("trained") if e["step"] < run.progress.step]
    last = statistics.mean(loss for s, loss in losses if s in sorted(set(epoch_1))[-3:])
    assert last < first - 0.5, (first, last)
    # every step applied every trainer's result (3 of 3), but the flush steps that end an epoch
    for t in trainers:
        partial = [e for e in t.events("applied") if e["decided"] and e["results"] != 3]
        assert not partial, (t.name, partial)
    # every round that trained before the cut was decided on chain by a strict majority of its seats
    # (2 of witness_nodes = 3); the round the localnet went down in may end without them
    witnessed, evals = await witnessed_steps(lr)
    unwitnessed = {
        s: witnessed.get(s, 0) for s in steps if s < cut.progress.step and witnessed.get(s, 0) < 2
    }
    assert not unwitnessed, (unwitnessed, witnessed)
    # held-out loss, measured between rounds, reaches the chain in the witnesses' metadata
    measured = [e["loss"] for t in trainers for e in t.events("evaluated")]
    assert measured and evals, (measured, evals)
    assert all(
        min(abs(x - m) for m in measured) < 1e-4 for x in evals
    )  # each one a client measured (f32)
    # points: rounds of each finished epoch times the share, to each client
    earned = {str(e.signer): e.earned for e in run.registry}
    assert all(earned[str(t.wallet.pubkey())] > 0 for t in trainers), earned
    # the checkpointer uploaded each epoch's checkpoint and pointed the chain's record at a revision
    pointed = trainers[0].events("hub_pointed")
    assert pointed and not trainers[0].events("hub_upload_failed"), trainers[0].events(
        "hub_not_pointed"
    )
    commits = hub.repos[("model", "me/run")].commits
    assert all(e["revision"] in commits for e in pointed)
    pointer = (await lr.state()).model.checkpoint
    assert pointer.repo == "me/run" and pointer.revision in commits, pointer
    # ... and exported its metrics: OpenMetrics on 127.0.0.1, TensorBoard files
    (served,) = trainers[0].events("metrics_served")
    with urllib.request.urlopen(served["url"], timeout=5) as answer:
        scraped = answer.read().decode()
    assert "cohort_train_loss " in scraped and "cohort_network_bytes_received " in scraped
    board = EventAccumulator(str(metrics))
    board.Reload()
    assert {"train/loss", "network/bytes_sent", "eval/loss"} <= set(board.Tags()["scalars"])
    # SIGTERM: the client finishes what is in flight, then leaves the run (exit_run) and exits 0
    trainers[0].process.send_signal(signal.SIGTERM)
    assert trainers[0].process.wait(60) == 0
    assert trainers[0].events("exited")
    left = await lr.state()
    assert all(e.signer != trainers[0].wallet.pubkey() for e in left.registry)
