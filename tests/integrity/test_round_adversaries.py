"""Members that try to split, stall or empty a round, with real processes (the project's client with one
behaviour swapped: tests/support/adversary.py), in one run of six: an equivocating twin (signs two
different valid results for each step it trains and pushes each to a different half of its peers, behind
fillers that fill its gossip quota there), a byte-for-byte copier (announces another trainer's result,
bytes unchanged, as its own with its own batch) and a copy squatter (trains honestly, and opens 1-byte
requests at offset 0 for every other result as soon as it is announced, never reading them), among three
honest clients; five seats of six.

The twin's two statements get past its fillers to the honest members, which report it: it is convicted
on chain in its first epoch. The copies are refused by every honest member (a payload names its batch)
and never decided; the copier is dropped. The squatter costs nobody their copies. No honest member leaves,
fails or is dropped, every round decides with every honest result, the replicas stay identical (the
squatter's too) and the run goes on to its next epoch."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.adversary_run import adversary, conviction, honest_epoch

from cohort.client.runtime.local_run import LocalRun, write_config
from cohort.sdk.models import Run, RunState

pytestmark = pytest.mark.slow
ADVERSARIES = {3: "twin", 4: "clone", 5: "squat"}


async def test_a_twin_a_copier_and_a_squatter_cannot_split_stall_or_empty_a_round(tmp_path: Path):
    # Five seats of six, a majority of three: the squatter witnesses as the honest do (its view is theirs),
    # so four of the six vote alike and at least three of them sit in every round; the twin's and the
    # copier's seats vote for results only they hold. A training time of 8 s: a squat of the trainer's
    # copies used to cost fetchers 10 s, and seats leave out what they do not hold in time.
    config = write_config(tmp_path / "run.toml", epoch_time=30, max_round_train_time=8, warmup_time=15,
                          init_min_clients=6, min_clients=3, witness_nodes=5)  # fmt: skip
    async with LocalRun(config=config, root=tmp_path / "run") as lr:
        trainers = await lr.start_members(
            6, options=lambda i: adversary(ADVERSARIES[i]) if i in ADVERSARIES else {}
        )
        honest, (twin, copier, squatter) = trainers[:3], trainers[3:]
        keys = {t.wallet.pubkey() for t in [*honest, squatter]}
        # states other than healthy seen of the honest members and the squatter; the copier's states
        harmed: set[str] = set()
        copier_states: set[str] = set()

        def watching(predicate):
            def check(run: Run) -> bool:
                harmed.update(
                    f"{c.signer}: {c.state}"
                    for c in run.clients
                    if c.signer in keys and c.state != "Healthy"
                )
                copier_states.update(
                    c.state for c in run.clients if c.signer == copier.wallet.pubkey()
                )
                return predicate(run)

            return check

        first = await lr.wait_for(
            watching(lambda r: r.state == RunState.RoundTrain), 120, "the first round"
        )
        epoch = first.progress.epoch
        index = {t.name: first.client(t.wallet.pubkey()).index for t in trainers}
        convicted = await conviction(lr, twin, 60, "the twin's conviction")
        assert convicted.progress.epoch == epoch  # within its first epoch
        await lr.wait_for(
            watching(lambda r: r.progress.epoch > epoch), 90, f"the end of epoch {epoch}"
        )
        end = await honest_epoch(
            lr,
            [*honest, squatter],
            [twin, copier],
            epoch,
            30,
            refused=frozenset({index[copier.name]}),
        )
        watching(lambda r: True)(end)
        assert not harmed, harmed

        # the twin pushed its two results to different peers; honest members came to hold both statements
        # and saw the equivocation (the first report convicts: later ones lose the race to it, and a member
        # that had one statement by then drops the other, from a member no longer healthy)
        first_twins = twin.events("twin_published")[0]  # later ones: after its conviction
        assert first_twins["pushed"] == sum(first_twins["peers"]), first_twins
        assert min(first_twins["peers"]) >= 1 and first_twins["fillers"] > 0, first_twins
        seen = [e["sender"] for t in [*honest, squatter] for e in t.events("equivocation")]
        assert seen and set(seen) == {index[twin.name]}, seen
        assert any(t.events("equivocation_reported") for t in trainers)

        # the copier announced others' results as its own: every honest member refused its copy (and nobody
        # else's result), and saw one commitment announced by two trainers; it earned nothing (honest_epoch)
        assert copier.events("cloned"), copier.events("clone_missed")
        assert "Dropped" in copier_states, copier_states  # left out of every decided list
        for t in [*honest, squatter]:
            assert {e["sender"] for e in t.events("bad_result")} == {index[copier.name]}, t.name
        assert any(
            index[copier.name] in e["trainers"]
            for t in honest
            for e in t.events("duplicate_commitment")
        )

        # the squatter's 1-byte requests were answered (it squatted on every honest trainer's results) and
        # cost nobody a copy (below: no honest result was ever left out)
        squats = squatter.events("squatted")
        assert {e["trainer"] for e in squats if e["granted"]} >= {index[t.name] for t in honest}, (
            squats
        )

        # every round of the epoch decided (its last step, flushed, has no round after it to decide it), each
        # with every honest result (the three honest members' and the squatter's: none was left out), and
        # every honest member applied each of its steps
        ended = min(e["step"] for e in honest[0].events("epoch_end") if e["epoch"] == epoch)
        flushed = {e["step"] for t in honest for e in t.events("flush_round")}
        steps = set(range(first.progress.step, ended)) - flushed
        for t in honest:
            applied = [e for e in t.events("applied") if e["step"] in steps]
            assert {e["step"] for e in applied} == steps, (t.name, sorted(steps))
            assert all(e["decided"] and e["results"] >= 4 for e in applied), [
                e for e in applied if not e["decided"] or e["results"] < 4
            ]
