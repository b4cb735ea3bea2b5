"""Faults with real processes: a client SIGKILLed mid-round is dropped by the others' health checks, the
epoch goes on, and every survivor ends it (epoch_end) with the same weights, without leaving or failing;
restarted with the same wallet it rejoins at the next epoch with the same node id, loads the checkpoint the
finishers voted (by majority) from its peers, and ends that epoch with the same weights as everyone. The
four clients share one HOME and its default checkpoint directories."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from cohort.client.runtime.local_run import LocalRun, failures, write_config
from cohort.sdk.models import RunState

pytestmark = pytest.mark.slow


def digests(trainers, epoch: int) -> set[str]:
    return {e["digest"] for t in trainers for e in t.events("epoch_end") if e["epoch"] == epoch}


async def test_killed_client_is_dropped_and_rejoins_from_a_checkpoint(tmp_path: Path):
    # four clients, three seats a round with a majority of two: one dead witness cannot stall a round
    config = write_config(tmp_path / "run.toml", epoch_time=20, max_round_train_time=5, warmup_time=12,
                          init_min_clients=4, min_clients=3, witness_nodes=3)  # fmt: skip
    env = {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": ""}
    async with LocalRun(config=config, root=tmp_path / "run", env=env) as lr:
        trainers = await lr.start_members(4)
        *survivors, victim = trainers
        first = await lr.wait_for(
            lambda r: r.progress.epoch == 1 and r.state == RunState.RoundTrain, 120, "epoch 1"
        )
        await lr.wait_for(
            lambda r: r.progress.step >= first.progress.step + 2, 60, "two rounds of epoch 1"
        )
        node_id = victim.events("p2p_started")[0]["node_id"]
        os.killpg(victim.process.pid, signal.SIGKILL)
        victim.process.wait(10)

        # the others go on: the victim's results stop, and the witnesses' health check drops it
        victim_wallet = victim.wallet.pubkey()
        dropped = await lr.wait_for(lambda r: r.client(victim_wallet) is not None and r.client(victim_wallet).state == "Dropped",
                                    60, "the health check")  # fmt: skip
        assert dropped.progress.epoch == 1 and any(t.events("health_check") for t in survivors)
        after = await lr.wait_for(lambda r: r.progress.epoch >= 2, 120, "the end of epoch 1")
        await lr.wait_for_events(
            "epoch_end", 1, 30, trainers=survivors, epoch=1
        )  # a late finish may come after
        assert all(t.alive for t in survivors)
        ends = {t.name: [e for e in t.events("epoch_end") if e["epoch"] == 1] for t in survivors}
        assert all(len(e) == 1 for e in ends.values()), ends  # every survivor ended the epoch
        assert len(digests(survivors, 1)) == 1, ends
        assert not [f for t in survivors for f in failures(t)], [
            f for t in survivors for f in failures(t)
        ]
        ended = ends[survivors[0].name][0]["step"]
        assert ended > dropped.progress.step  # rounds went on after the drop
        voted = after.model.checkpoint
        saved = {
            e["manifest"]
            for t in survivors
            for e in t.events("checkpoint_saved")
            if e["epoch"] == 1
        }
        assert voted.step == after.progress.step and saved == {voted.weights_sha256.hex()}, (
            voted,
            saved,
        )

        # the same wallet again: it rejoins the next epoch (which needs it: init_min_clients = 4)
        restarted = lr.start_trainer("c3", (victim.wallet, victim.wallet_path))
        await lr.wait_for(lambda r: r.progress.epoch >= 3, 150, "epoch 2 with the restarted client")
        await lr.wait_for_events("epoch_end", 1, 30, trainers=[*survivors, restarted], epoch=2)
        assert all(t.alive for t in [*survivors, restarted])
        assert [e["node_id"] for e in restarted.events("p2p_started")] == [node_id, node_id]
        loaded = [e for e in restarted.events("checkpoint_loaded") if e["epoch"] == 2]
        assert loaded and loaded[0]["manifest"] == voted.weights_sha256.hex(), restarted.events(
            "no_weights"
        )
        assert (
            len(digests(trainers, 2)) == 1
            and len([e for e in restarted.events("epoch_end") if e["epoch"] == 2]) == 1
        )
