"""Members that send dishonest results, with real processes: three honest clients and one adversary (the
project's client with its training swapped: tests/support/adversary.py) in a run that verifies half of
all results. The adversary is convicted on chain by a majority of its verifiers within its first epoch,
loses its points, and no honest member is reported, convicted or leaves; their replicas stay identical. A
conviction takes a dispute: the two failed reports open it, and a committee drawn from a seed revealed three
rounds later replays the step again, so the epochs are long enough for both within the first one.
Two runs take the two ways to conviction — a negated payload (the replay disagrees with it) and a copied
one (it commits a state its sender does not hold; that run has pipeline depth 3, so honest replays
are checked against weights three steps back); a third has three adversaries at once (a random
payload, no compute at all, training on its own text) among four honest clients, with a quarter of the
results verified. A fourth adversary sends negated payloads and runs from its first drawn check: it claims
its points (there are none yet: an epoch's are credited when it ends, to its finishers), leaves the run
(exit_run) before its verifiers can fetch its states, and is convicted all the same (neither they nor the
dispute's committee get its states) and barred. The member that cheats
only some of the time is caught by chance, so it runs in benchmarks/integrity/adversaries.py, which runs
every mode, repeatedly, and compares the loss with an all-honest run's."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

import pytest
from support.adversary_run import adversary, conviction, honest_epoch

from cohort.client.runtime.local_run import LocalRun, recent_events, write_config
from cohort.sdk.errors import ProgramError
from cohort.sdk.models import RunState

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("mode", "depth"), [("flip", 2), ("copy", 3)]
)  # honest replays hold at either depth
async def test_a_dishonest_trainer_is_convicted_by_its_verifiers(
    mode: str, depth: int, tmp_path: Path
):
    config = write_config(tmp_path / "run.toml", epoch_time=45, max_round_train_time=8, warmup_time=15,
                          init_min_clients=4, min_clients=3, witness_nodes=3, verification_percent=50,
                          pipeline_depth=depth)  # fmt: skip
    async with LocalRun(config=config, root=tmp_path / "run") as lr:
        trainers = await lr.start_members(4, options=lambda i: adversary(mode) if i == 3 else {})
        *honest, cheat = trainers
        first = await lr.wait_for(lambda r: r.state == RunState.RoundTrain, 120, "the first round")
        convicted = await conviction(lr, cheat, 90, f"the {mode} adversary's conviction")
        assert convicted.progress.epoch == first.progress.epoch  # within its first epoch
        await honest_epoch(lr, honest, [cheat], first.progress.epoch, 120)
        # the verifiers' reports name only the adversary; honest checks passed
        reported = {e["trainer"] for t in honest for e in t.events("check_failed")}
        cheat_index = convicted.client(cheat.wallet.pubkey()).index
        assert reported == {cheat_index}, reported
        assert any(e["trainer"] != cheat_index for t in honest for e in t.events("checked"))


async def refusal(transaction: Awaitable) -> str:
    """The name of the program's error that refused `transaction`."""
    with pytest.raises(ProgramError) as refused:
        await transaction
    return refused.value.name


async def test_a_cheat_that_runs_from_its_check_is_convicted_and_keeps_nothing(tmp_path: Path):
    config = write_config(tmp_path / "run.toml", epoch_time=45, max_round_train_time=8, warmup_time=15,
                          init_min_clients=4, min_clients=3, witness_nodes=3, verification_percent=50)  # fmt: skip
    async with LocalRun(config=config, root=tmp_path / "run") as lr:
        trainers = await lr.start_members(4, options=lambda i: adversary("flee") if i == 3 else {})
        *honest, cheat = trainers
        first = await lr.wait_for(lambda r: r.state == RunState.RoundTrain, 120, "the first round")
        epoch = first.progress.epoch
        # it claims what it earned so far: nothing, this epoch's points are credited when it ends (or it has
        # left already: its first check may be drawn a few rounds into the epoch)
        refused = await refusal(lr.client.claim_points(cheat.wallet, lr.run_file.run_id))
        assert refused in ("NoChange", "NotAClient"), refused
        # it leaves on its own (exit_run, then the process ends) once a check of its results is drawn
        await lr.wait_for(lambda r: not cheat.alive, 90, "the flee adversary's exit")
        assert cheat.process.wait(10) == 0 and cheat.events("exited"), recent_events(cheat)
        # exit_run took out nothing, and a claim now finds nothing either (it is out of the run, or its record
        # is the fresh one a conviction wrote)
        refused = await refusal(lr.client.claim_points(cheat.wallet, lr.run_file.run_id))
        assert refused in ("NotAClient", "NoChange"), refused
        points = await lr.client.points(lr.run_file.run_id, cheat.wallet.pubkey())
        assert all(p.claimed == 0 for p in points), points
        convicted = await conviction(lr, cheat, 90, "the conviction of the adversary that left")
        assert convicted.progress.epoch == epoch  # within its first epoch, after it left
        end = await honest_epoch(lr, honest, [cheat], epoch, 120)
        reported = {e["trainer"] for t in honest for e in t.events("check_failed")}
        assert reported == {convicted.client(cheat.wallet.pubkey()).index}, reported
        # barred for the run's ban (its registry entry keeps the record), and it earned nothing
        entry = next(e for e in end.registry if e.signer == cheat.wallet.pubkey())
        assert entry.banned_until > epoch and entry.earned == 0, entry
        # the members' checkpoints stay under the run's root, not in the user's cache
        assert all(any((lr.root / f"{t.name}-checkpoints").rglob("config.json")) for t in honest)


async def test_three_kinds_of_cheat_at_once_are_all_convicted(tmp_path: Path):
    # a quarter of the results checked, not half: seven members on a CI machine's cores replaying 1.75 steps
    # for each one trained reported a cheat ~8 steps late, and its dispute found the step's results and
    # weights gone (members keep them 10 and 11 steps); each cheat is still checked ~20 times an epoch
    modes = {4: "random", 5: "lazy", 6: "poison"}
    config = write_config(tmp_path / "run.toml", epoch_time=60, max_round_train_time=8, warmup_time=15,
                          init_min_clients=7, min_clients=4, witness_nodes=3, verification_percent=25)  # fmt: skip
    async with LocalRun(config=config, root=tmp_path / "run") as lr:
        trainers = await lr.start_members(
            7, options=lambda i: adversary(modes[i]) if i in modes else {}
        )
        honest, cheats = trainers[:4], trainers[4:]
        first = await lr.wait_for(lambda r: r.state == RunState.RoundTrain, 120, "the first round")
        for cheat, mode in zip(cheats, modes.values(), strict=True):
            convicted = await conviction(lr, cheat, 120, f"the {mode} adversary's conviction")
            assert convicted.progress.epoch == first.progress.epoch  # within its first epoch
        await honest_epoch(lr, honest, cheats, first.progress.epoch, 150)
        indices = {convicted.client(t.wallet.pubkey()).index for t in cheats}
        reported = {e["trainer"] for t in honest for e in t.events("check_failed")}
        assert reported <= indices, (reported, indices)
