"""Sixteen clients of the SYNTHETIC trainer (real chain, P2P and transactions; payloads of the real model's
size, no training) on one localnet: rounds go on, replicas agree, each client serves only a few copies of
its own result (holders re-serve the rest), and per-client RPC load and non-result bytes stay small."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from cohort.client.runtime.local_run import LocalRun, failures, write_config

pytestmark = pytest.mark.slow
CLIENTS = 16
ROUNDS = 4


async def test_sixteen_synthetic_clients_keep_per_client_load_flat(tmp_path: Path):
    config = write_config(tmp_path / "run.toml", global_batch_size_start=32, global_batch_size_end=32,
                          init_min_clients=CLIENTS, min_clients=8, epoch_time=3600, max_round_train_time=30,
                          warmup_time=240)  # fmt: skip
    async with LocalRun(
        config=config,
        root=tmp_path / "run",
        trainer_args=("--synthetic", "--synthetic-seconds", "0.25"),
        fork_clients=True,
    ) as lr:  # 2 sequences each: 0.5 s steps
        trainers = await lr.start_members(CLIENTS)
        first = await lr.wait_for(lambda r: r.state.value == "RoundTrain", 300, "the first round")
        skip = first.progress.step + 2
        await lr.wait_for_events("applied", 1, 120, step=skip)  # from here the harness reads no RPC
        before = await lr.rpc_stats()
        await lr.wait_for_events("applied", 1, 60 * ROUNDS, step=skip + ROUNDS)
        after = await lr.rpc_stats()
        assert not [f for t in trainers for f in failures(t)], [
            f for t in trainers for f in failures(t)
        ]
        # replicas agree: every client applied the same number of results each step
        applied = {
            (e["step"], e["results"])
            for t in trainers
            for e in t.events("applied")
            if skip <= e["step"] <= skip + ROUNDS
        }
        assert len({step for step, _ in applied}) == len(applied), applied
        traffic = [
            [e for e in t.events("traffic") if skip <= e["step"] <= skip + ROUNDS] for t in trainers
        ]
        own = [
            e["own_uploads"] for events in traffic for e in events if e["own_uploads"] is not None
        ]
        assert own and max(own) <= 3, (
            own
        )  # a result's author serves a constant few copies, whatever N
        payload = trainers[0].events("trained")[0]["bytes"]
        per_round = [
            (e[-1]["received"] - e[0]["received"]) / (e[-1]["step"] - e[0]["step"])
            for e in traffic
            if len(e) > 1
        ]
        beyond_results = statistics.median(per_round) - (CLIENTS - 1) * payload
        # what comes with each result (its announcement, flooded over the overlay's few neighbours, and
        # the lists) is a constant per result: the bytes beyond the results are flat in N per result
        assert beyond_results < (CLIENTS - 1) * (10 << 10), (statistics.median(per_round), payload)
        rpc_bytes = (after["bytes_out"] - before["bytes_out"]) / CLIENTS / ROUNDS
        assert rpc_bytes < 16 << 10, (
            rpc_bytes
        )  # the hot prefix and transactions: a few KB per client and round
