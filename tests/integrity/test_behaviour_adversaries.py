"""Members that misbehave in the protocol rather than in their payloads, with real processes (the project's
client with one behaviour swapped: tests/support/adversary.py), in one run of six: an equivocator (signs two
results for every step) and a censoring witness (leaves an honest trainer out of every list it attests),
among four honest clients with the default three seats. The equivocator is proven on chain and convicted;
the censor's lists lose to the honest majority's, so nobody honest is dropped or leaves; the honest
replicas stay bit-identical and the run keeps going. A second run of six holds a coalition of two verifiers
that slander every trainer they check (they open disputes, convict nobody and are convicted themselves) and
a member that overclaims its speed (it earns what the others earn)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.adversary_run import adversary, conviction, honest_epoch

from cohort.client.runtime.local_run import LocalRun, write_config
from cohort.sdk.models import RunState

pytestmark = pytest.mark.slow
ADVERSARIES = {4: "equivocate", 5: "censor"}


async def test_an_equivocator_is_convicted_and_a_censor_drops_nobody(tmp_path: Path):
    # six training processes share two cores here: a seat's grace for the last results (a third of the
    # training time, at least 2 s) must outlast the fetches of a loaded machine, or seats leave honest
    # trainers out
    config = write_config(tmp_path / "run.toml", epoch_time=30, max_round_train_time=8, warmup_time=15,
                          init_min_clients=6, min_clients=4, witness_nodes=3)  # fmt: skip
    async with LocalRun(config=config, root=tmp_path / "run") as lr:
        trainers = await lr.start_members(
            6, options=lambda i: adversary(ADVERSARIES[i]) if i in ADVERSARIES else {}
        )
        honest = trainers[:4]
        equivocator, censor = trainers[4], trainers[5]
        first = await lr.wait_for(lambda r: r.state == RunState.RoundTrain, 120, "the first round")
        convicted = await conviction(lr, equivocator, 60, "the equivocator's conviction")
        assert convicted.progress.epoch == first.progress.epoch  # within its first epoch
        # the censor's lists lose to the majority's: the chain counts its dissents (3: no more seats)
        await lr.wait_for(lambda r: (c := r.client(censor.wallet.pubkey())) is not None and c.dissents >= 1,
                          90, "the censor's first lost decision")  # fmt: skip
        end = await honest_epoch(lr, honest, [equivocator], first.progress.epoch, 120)
        assert any(
            t.events("equivocation_reported") for t in [*honest, censor]
        )  # the first proof convicts
        # every step applied the majority's list: the four honest results and the censor's own
        applied = [e for t in honest for e in t.events("applied")
                   if e["decided"] and first.progress.step + 1 < e["step"] < end.progress.step]  # fmt: skip
        assert applied and all(e["results"] >= 5 for e in applied), applied


async def test_a_coalition_of_two_slanderers_convicts_nobody_and_an_overclaimer_gains_nothing(
    tmp_path: Path,
):
    """Two of six members report every check they are drawn for as a replay mismatch, without replaying
    (tests/support/adversary.py `slander`). Both drawn for one honest trainer's check (3 of its 5 possible
    verifiers: 3 in 10 checks) are a majority of it, which opens a dispute, not a conviction; the dispute's
    committee (the five others) replays the step, the three honest members' passes are its majority, and the
    check's reporters that claimed a mismatch are convicted (FalseReport). No honest member is convicted,
    reported or leaves; the slanderers earn nothing. In the same run a member that trains honestly declares
    10^9 tokens/s when it joins (`overclaim`): its share is the median's, so it earns no more than the others
    and its batch stretches no round."""
    config = write_config(tmp_path / "run.toml", epoch_time=30, max_round_train_time=8, warmup_time=15,
                          init_min_clients=6, min_clients=4, witness_nodes=3,
                          verification_percent=25)  # fmt: skip
    modes = {3: "overclaim", 4: "slander", 5: "slander"}
    async with LocalRun(config=config, root=tmp_path / "run") as lr:
        trainers = await lr.start_members(
            6, options=lambda i: adversary(modes[i]) if i in modes else {}
        )
        honest, coalition = trainers[:4], trainers[4:]  # the overclaimer trains and checks honestly
        first = await lr.wait_for(lambda r: r.state == RunState.RoundTrain, 120, "the first round")
        shares = {c.share for t in honest if (c := first.client(t.wallet.pubkey())) is not None}
        assert len(shares) == 1, shares  # the overclaimer's is the median's
        for member in coalition:
            convicted = await conviction(lr, member, 90, "a slanderer's conviction")
            assert convicted.progress.epoch == first.progress.epoch  # within its first epoch
        end = await honest_epoch(lr, honest, coalition, first.progress.epoch, 120)
        states = [c.state for c in (end.client(t.wallet.pubkey()) for t in honest) if c is not None]
        assert "Convicted" not in states, states
        assert not [e for t in honest for e in t.events("check_failed")]
        refuted = [e for t in honest for e in t.events("checked") if e.get("dispute")]
        assert refuted, "no honest member replayed a dispute the coalition opened"
        earned = {e.signer: e.earned for e in end.registry}
        overclaimer = earned[honest[3].wallet.pubkey()]
        assert overclaimer <= max(earned[t.wallet.pubkey()] for t in honest[:3]), earned
