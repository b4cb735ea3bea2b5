"""Three `cohort train` processes and the RPC node, each behind its own emulated internet link (support.wan:
one-way delay, loss, rate): training proceeds, replicas stay bit-identical, and no client leaves an epoch,
is dropped, or retries its way out. The first runs with verification on (5% of results, the packaged
example's rate): every check that starts passes (its parts fetched, retried part by part, over the lanes'
connections, its weights held while it runs), nobody is reported or convicted, and the checks' traffic does
not make a round's results late (check fetches take the fetcher's background slots and are served behind
results). Over these lossy paths a check's ~1 MB come at QUIC's loss-bound rate (6-12 s at 40 ms, 20-25 s
at 120 ms): one that outlasts its epoch (20 s here) passes all the same, as a `check_lapsed` event with its
verdict (a failure found then could no longer be reported: a real run's Cooldown lasts as long as a check)."""

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


def check_keys(trainers: list, kind: str) -> set[tuple[str, int, int, bool]]:
    return {
        (t.name, e["step"], e["trainer"], e.get("dispute", False))
        for t in trainers
        for e in t.events(kind)
    }


def check_verdicts(trainers: list) -> dict[tuple[str, int, int, bool], str]:
    """Each check's outcome: passed (in its epoch, or after it: check_lapsed), or what else it came to."""
    out: dict[tuple[str, int, int, bool], str] = {}
    for t in trainers:
        for kind in ("checked", "check_failed", "check_skipped", "check_lapsed"):
            for e in t.events(kind):
                verdict = (
                    e.get("verdict", "passed") if kind in ("checked", "check_lapsed") else kind
                )
                out[(t.name, e["step"], e["trainer"], e.get("dispute", False))] = verdict
    return out


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_three_clients_train_through_emulated_links(make_bed, tmp_path: Path, profile: str):
    link = PROFILES[profile]
    nodes = {"rpc": link, "c0": link, "c1": link, "c2": link}
    config = write_config(
        tmp_path / "run.toml", epoch_time=20, max_round_train_time=6, warmup_time=15,
        verification_percent=5,
    )  # fmt: skip
    bed = make_bed(nodes)
    async with LocalRun(config=config, root=tmp_path / "run", placement=bed) as lr:
        trainers = await lr.start_members(3)
        await lr.wait_for(
            lambda r: r.progress.epoch >= 2, 240, "two epochs through the emulated links"
        )
        await lr.wait_for_events(
            "epoch_end", 1, 30, epoch=1
        )  # the last checkpoint may still be written
        assert all(t.alive for t in trainers)
        assert not [f for t in trainers for f in failures(t)], [
            f for t in trainers for f in failures(t)
        ]
        for epoch in range(2):
            ends = [
                e["digest"] for t in trainers for e in t.events("epoch_end") if e["epoch"] == epoch
            ]
            assert len(ends) == 3 and len(set(ends)) == 1, (epoch, ends)
        trained = {e["step"] for t in trainers for e in t.events("trained")}
        assert len(trained) >= 8, trained  # two epochs of four or more steps (one flush round each)
        # verification over the same links: every check begun so far ends, and passes; nobody was reported
        started = check_keys(trainers, "check_started")
        await lr.wait_for(
            lambda r: started <= set(check_verdicts(trainers)),
            60,
            "the verdicts of the checks begun",
        )
        verdicts = check_verdicts(trainers)
        assert all(verdicts[k] == "passed" for k in started), verdicts
        # at 40 ms two epochs hold ~40 steps, so 5% draws a check (no draw: ~0.2%); at 120 ms they hold ~16, and
        # one run in eight or so draws none at all
        assert started or profile == "intercontinental", verdicts
        assert not [e for t in trainers for e in t.events("check_reported")]
        run = await lr.wait_for(lambda r: True, 10, "the run")
        states = [c.state for t in trainers if (c := run.client(t.wallet.pubkey())) is not None]
        assert "Convicted" not in states, states


async def test_a_slow_far_client_trains_a_smaller_share_and_the_run_keeps_going(
    make_bed, tmp_path: Path
):
    """Uneven hardware through emulated links: two clients at 40 ms, one at 160 ms with a quarter of their
    compute (`--slowdown 4`). From the second epoch its share of each batch follows the throughput it
    declared when it joined again, so it computes about as long as the others instead of four times as
    long; nobody leaves, replicas stay bit-identical. The demo's 2 s Cooldown stays: a far client whose last
    apply outlasts it finishes the epoch late (what the Cooldown decided is final)."""
    fast, slow = (
        Link(delay_ms=40, rate_mbit=50, loss=0.01),
        Link(delay_ms=160, rate_mbit=20, loss=0.01),
    )
    bed = make_bed({"rpc": fast, "c0": fast, "c1": fast, "c2": slow})
    # 24 sequences a client (not the demo's 8), so a step's time is mostly its tokens', not the fixed cost of
    # compressing and encoding a result: a smaller share can only shorten the part that scales with it
    config = write_config(tmp_path / "run.toml", epoch_time=24, max_round_train_time=10, warmup_time=20,
                          global_batch_size_start=72, global_batch_size_end=72)  # fmt: skip
    async with LocalRun(config=config, root=tmp_path / "run", placement=bed) as lr:
        trainers = await lr.start_members(
            3, options=lambda i: {"extra": ("--slowdown", "4")} if i == 2 else {}
        )
        await lr.wait_for(lambda r: r.progress.epoch >= 2, 300, "two epochs with a slow far client")
        await lr.wait_for_events("epoch_end", 1, 30, epoch=1)
        assert all(t.alive for t in trainers)
        assert not [f for t in trainers for f in failures(t)], [
            f for t in trainers for f in failures(t)
        ]
        for epoch in range(2):
            ends = [
                e["digest"] for t in trainers for e in t.events("epoch_end") if e["epoch"] == epoch
            ]
            assert len(ends) == 3 and len(set(ends)) == 1, (epoch, ends)
        starts = {e["epoch"]: e["step"] for e in trainers[0].events("epoch_started")}

        def in_epoch_1(trainer, key: str) -> list:
            return [
                e[key]
                for e in trainer.events("trained")
                if starts[1] <= e["step"] < starts.get(2, 10**9)
            ]

        slow_batch, fast_batch = in_epoch_1(trainers[2], "batch"), in_epoch_1(trainers[0], "batch")
        assert slow_batch and fast_batch
        assert max(b[1] - b[0] for b in slow_batch) < min(b[1] - b[0] for b in fast_batch), (
            slow_batch,
            fast_batch,
        )
        slow_s, fast_s = (
            sorted(in_epoch_1(trainers[2], "seconds")),
            sorted(in_epoch_1(trainers[0], "seconds")),
        )
        assert slow_s[len(slow_s) // 2] < 2.5 * fast_s[len(fast_s) // 2], (slow_s, fast_s)
