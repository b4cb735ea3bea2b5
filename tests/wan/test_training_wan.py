"""Three `cohort train` processes and the RPC node, each behind its own emulated internet link (support.wan:
one-way delay, loss, rate): training proceeds, replicas stay bit-identical, and no client leaves an epoch,
is dropped, or retries its way out."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.wan import Link

from cohort.client.runtime.local_run import LocalRun, failures, write_config

pytestmark = pytest.mark.slow

PROFILES = {
    "continental": Link(delay_ms=40, rate_mbit=50, loss=0.01),
    "intercontinental": Link(delay_ms=120, rate_mbit=20, loss=0.01),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_three_clients_train_through_emulated_links(make_bed, tmp_path: Path, profile: str):
    link = PROFILES[profile]
    nodes = {"rpc": link, "c0": link, "c1": link, "c2": link}
    config = write_config(tmp_path / "run.toml", epoch_time=20, max_round_train_time=6, warmup_time=15)
    bed = make_bed(nodes)
    async with LocalRun(config=config, root=tmp_path / "run", placement=bed) as lr:
        trainers = await lr.start_members(3)
        await lr.wait_for(lambda r: r.progress.epoch >= 2, 240, "two epochs through the emulated links")
        await lr.wait_for_events("epoch_end", 1, 30, epoch=1)  # the last checkpoint may still be written
        assert all(t.alive for t in trainers)
        assert not [f for t in trainers for f in failures(t)], [f for t in trainers for f in failures(t)]
        for epoch in range(2):
            ends = [e["digest"] for t in trainers for e in t.events("epoch_end") if e["epoch"] == epoch]
            assert len(ends) == 3 and len(set(ends)) == 1, (epoch, ends)
        trained = {e["step"] for t in trainers for e in t.events("trained")}
        assert len(trained) >= 8, trained  # two epochs of four or more steps (one flush round each)
