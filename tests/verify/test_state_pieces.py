"""`write_committed` is the one writer of committed states: given the momentum in pieces of any length (as a
member sharded over ranks streams it, a rank's rows at a time) it writes the very bytes, parts and
commitment `write_state` writes from a whole optimizer, and refuses momentum that is not the layout's."""

from __future__ import annotations

import random

import pytest
import torch

from cohort.client.distro import BatchId, Constant, DistroConfig, DistroOptimizer
from cohort.client.verify.sample import commit
from cohort.client.verify.state import (
    SIGNS_FILE,
    STATE_FILE,
    StateError,
    capture,
    state_bytes,
    write_committed,
    write_state,
)

CONFIG = DistroConfig(compression_chunk=8, compression_topk=3)


def optimizer(steps: int) -> DistroOptimizer:
    """Odd sizes on purpose (a bucket of 7 values, one of 2 × 45): sign codes cross piece ends."""
    gen = torch.Generator().manual_seed(0)
    params = [(name, torch.nn.Parameter(torch.randn(*shape, generator=gen)))
              for name, shape in (("a", (16, 24)), ("b", (9, 5)), ("c", (7,)), ("d", (16, 24)), ("e", (9, 5)))]  # fmt: skip
    opt = DistroOptimizer(params, CONFIG, Constant(1e-2))
    for step in range(steps):
        for _, p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.generate(step, BatchId(0, 1))
    return opt


def cut(values: torch.Tensor, seed: int) -> list[torch.Tensor]:
    """`values` in pieces of random lengths (1 to 50 values)."""
    rng, out, lo = random.Random(seed), [], 0
    while lo < values.numel():
        hi = min(values.numel(), lo + rng.randint(1, 50))
        out.append(values[lo:hi].clone())
        lo = hi
    return out


@pytest.mark.parametrize("steps", [0, 2])
def test_momentum_in_any_pieces_commits_like_write_state(steps, tmp_path):
    opt = optimizer(steps)
    whole = write_state(opt, 5, tmp_path / "whole")
    flat = torch.cat([m.reshape(-1) for m in opt.momentum])
    for seed in range(3):
        state = capture(opt, 5)
        pieces = write_committed(
            tmp_path / f"pieces-{seed}", opt.layout, 5, cut(flat, seed), state.sent
        )
        assert pieces.manifest == whole.manifest and pieces.commitment == whole.commitment
        for name in (STATE_FILE, SIGNS_FILE):
            assert (pieces.root / name).read_bytes() == (whole.root / name).read_bytes()
    assert whole.commitment == commit(state_bytes(opt, 5), opt.layout).commitment
    bare = write_committed(
        tmp_path / "bare", opt.layout, 5, [flat], capture(opt, 5).sent, signs=False
    )
    assert [f.name for f in bare.manifest.files] == [STATE_FILE] and not (
        bare.root / SIGNS_FILE
    ).exists()


def test_momentum_that_is_not_the_layouts_is_refused(tmp_path):
    opt = optimizer(1)
    flat, sent = torch.cat([m.reshape(-1) for m in opt.momentum]), capture(opt, 1).sent
    with pytest.raises(StateError, match="ends inside"):
        write_committed(tmp_path / "short", opt.layout, 1, [flat[:-1]], sent)
    with pytest.raises(StateError, match="more than"):
        write_committed(tmp_path / "long", opt.layout, 1, [flat, flat[:1]], sent)
    with pytest.raises(StateError, match="sent tiles"):
        write_committed(tmp_path / "sent", opt.layout, 1, [flat], sent[::-1])
