"""The weights a member keeps for checks: the newest steps, and older ones a running check holds."""

from __future__ import annotations

from pathlib import Path

import torch

from cohort.client.verify.snapshots import WeightSnapshots


def weights(value: float) -> list[torch.Tensor]:
    return [torch.full((4, 3), float(value)), torch.full((5,), -float(value))]


def files(root: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in root.glob("weights-*.bin"))


def test_a_held_step_outlives_the_window_until_released(tmp_path: Path):
    snaps = WeightSnapshots(tmp_path, keep=2)
    for step in (1, 2):
        snaps.take(step, weights(step))
    assert snaps.hold(1)  # a check of step 1 starts fetching
    for step in (3, 4):
        snaps.take(step, weights(step))
    assert files(tmp_path) == [1, 3, 4] and 1 in snaps and 2 not in snaps  # the window's two, and 1
    into = weights(0.0)
    snaps.load_into(1, into)  # bit for bit what was taken
    assert all(torch.equal(a, b) for a, b in zip(into, weights(1), strict=True))
    snaps.release(1)
    assert files(tmp_path) == [1, 3, 4]  # removed by the worker's next take, not under a replay
    snaps.take(5, weights(5))
    assert files(tmp_path) == [4, 5] and snaps.steps == [4, 5]


def test_a_hold_is_refused_for_a_step_gone_or_past_the_cap(tmp_path: Path):
    snaps = WeightSnapshots(tmp_path, keep=2)
    for step in (1, 2, 3):
        snaps.take(step, weights(step))
    assert not snaps.hold(1)  # gone already
    assert snaps.hold(2) and snaps.hold(3) and snaps.hold(2)  # twice: two checks of one step
    snaps.take(4, weights(4))
    assert not snaps.hold(4)  # `keep` steps are held already
    snaps.release(2)
    assert 2 in snaps.held()  # one hold of it is left
    snaps.release(2)
    assert snaps.held() == (3,) and snaps.hold(4)


def test_clear_and_a_rank_keep_what_is_held(tmp_path: Path):
    snaps = WeightSnapshots(tmp_path / "rank0", keep=1)
    other = WeightSnapshots(
        tmp_path / "rank1", keep=1
    )  # a sharded member's other rank: told what is held
    for step in (1, 2):
        snaps.take(step, weights(step), snaps.held())
        assert step == 2 or snaps.hold(1)
        other.take(step, weights(step), snaps.held())
    assert files(tmp_path / "rank0") == files(tmp_path / "rank1") == [1, 2]
    snaps.clear()  # a new epoch: the last one's check of step 1 is still running
    other.clear(snaps.held())
    assert files(tmp_path / "rank0") == files(tmp_path / "rank1") == [1]
    snaps.release(1)
    snaps.clear()
    assert files(tmp_path / "rank0") == [] and snaps.steps == []
    snaps.take(3, weights(3))
    with snaps.holding(3) as held, snaps.holding(9) as gone:
        assert held and not gone and snaps.held() == (3,)
    assert snaps.held() == ()
