"""Members that send dishonest results, with real processes: three honest clients and one adversary (the
project's client with its training swapped: tests/support/adversary.py) in a run that verifies half of
all results. The adversary is convicted on chain by a majority of its verifiers within its first epoch,
loses its points, and no honest member is reported, convicted or leaves; their replicas stay identical.
CI runs two modes that take the two ways to conviction — a negated payload (the replay disagrees with it)
and a copied one (it commits a state its sender does not hold); benchmarks/integrity/adversaries.py runs
every mode, repeatedly, and compares the loss with an all-honest run's."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.adversary_run import adversary, conviction, honest_epoch

from cohort.client.runtime.local_run import LocalRun, write_config
from cohort.sdk.models import RunState

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["flip", "copy"])
async def test_a_dishonest_trainer_is_convicted_by_its_verifiers(mode: str, tmp_path: Path):
    config = write_config(tmp_path / "run.toml", epoch_time=30, max_round_train_time=5, warmup_time=15,
                          init_min_clients=4, min_clients=3, witness_nodes=3, verification_percent=50)  # fmt: skip
    async with LocalRun(config=config, root=tmp_path / "run") as lr:
        trainers = await lr.start_members(4, options=lambda i: adversary(mode) if i == 3 else {})
        *honest, cheat = trainers
        first = await lr.wait_for(lambda r: r.state == RunState.RoundTrain, 120, "the first round")
        convicted = await conviction(lr, cheat, 60, f"the {mode} adversary's conviction")
        assert convicted.progress.epoch == first.progress.epoch  # within its first epoch
        await honest_epoch(lr, honest, [cheat], first.progress.epoch, 90)
        # the verifiers' reports name only the adversary; honest checks passed
        reported = {e["trainer"] for t in honest for e in t.events("check_failed")}
        cheat_index = convicted.client(cheat.wallet.pubkey()).index
        assert reported == {cheat_index}, reported
        assert any(e["trainer"] != cheat_index for t in honest for e in t.events("checked"))
