import math

import pytest

from cohort.client.distro.schedule import ColdStart, Constant, Cosine, Linear, WarmupStableDecay


def test_constant_with_warmup():
    s = Constant(1.0, warmup_steps=4, warmup_init_lr=0.2)
    assert [s(t) for t in range(6)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 1.0])


def test_linear():
    s = Linear(1.0, total_steps=12, final_lr=0.0, warmup_steps=2)
    assert s(0) == 0.0 and s(1) == 0.5 and s(2) == 1.0
    assert s(7) == pytest.approx(0.5) and s(12) == 0.0 and s(10_000) == 0.0


def test_cosine_is_clamped_after_total_steps():
    s = Cosine(4e-4, total_steps=110, final_lr=4e-5, warmup_steps=10)
    assert s(10) == pytest.approx(4e-4)
    assert s(60) == pytest.approx(4e-5 + (4e-4 - 4e-5) * 0.5)
    assert s(110) == pytest.approx(4e-5)
    assert s(200) == pytest.approx(4e-5)  # Psyche's cosine would climb back to 4e-4 at 210


def test_warmup_stable_decay():
    s = WarmupStableDecay(
        base_lr=2e-4,
        warmup_steps=2,
        stable_steps=3,
        cosine_decay_steps=4,
        cosine_decay_final_lr=2e-5,
        linear_decay_steps=2,
        linear_decay_final_lr=0.0,
    )
    values = [s(t) for t in range(13)]
    assert values[:2] == pytest.approx([0.0, 1e-4])
    assert values[2:5] == pytest.approx([2e-4] * 3)
    assert values[5] == pytest.approx(2e-4)
    assert values[7] == pytest.approx(2e-5 + (2e-4 - 2e-5) * 0.5 * (1 + math.cos(math.pi / 2)))
    assert values[9] == pytest.approx(2e-5)
    assert values[10] == pytest.approx(1e-5)
    assert values[11:] == pytest.approx([0.0, 0.0])


def test_cold_start_factor():
    s = ColdStart(Constant(1.0), start_step=10, warmup_steps=4)
    assert [s(t) for t in (9, 10, 11, 13, 14)] == pytest.approx([1.0, 0.0, 0.25, 0.75, 1.0])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Constant(-1.0), "base_lr"),
        (lambda: Constant(float("nan")), "base_lr"),
        (lambda: Cosine(1.0, total_steps=5, warmup_steps=5), "must exceed warmup_steps"),
        (lambda: Linear(1.0, total_steps=-1), "total_steps"),
        (lambda: WarmupStableDecay(1.0, 1, 1, 1, 0.1, 1, -0.1), "linear_decay_final_lr"),
        (lambda: ColdStart(Constant(1.0), start_step=0, warmup_steps=1.5), "warmup_steps"),
    ],
)
def test_bad_parameters_are_rejected(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_negative_step_is_rejected():
    with pytest.raises(ValueError, match="step must be >= 0"):
        Constant(1.0)(-1)
