import logging

import pytest
import torch

from cohort.client.distro import BatchId, Constant, DistroConfig, DistroOptimizer
from cohort.client.distro.compress import compress, densify
from cohort.client.distro.dct import decode, encode

BATCH = BatchId(0, 1)


class Two(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(8, 8, generator=generator).to(dtype))
        self.b = torch.nn.Parameter(torch.randn(8, generator=generator).to(dtype))


def set_grads(model, seed):
    generator = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=generator).to(p.dtype)


def lr(step):
    return 0.01 * (step + 1)  # distinct per step, so a wrong step's LR shows


def test_generate_follows_psyche_order():
    """undo lookahead, - own previous transmission, weight decay, decay, + lr*grad, DCT, top-k."""
    config = DistroConfig(
        compression_decay=0.9,
        compression_chunk=4,
        compression_topk=3,
        weight_decay=0.1,
        clip_grad_norm=None,
        quantize_1bit=False,
        value_dtype="fp32",
    )
    model = Two()
    opt = DistroOptimizer(model.named_parameters(), config, lr)
    w0, b0 = model.w.detach().clone(), model.b.detach().clone()
    tile_w, tile_b = opt.layout.buckets[0].tile, opt.layout.buckets[1].tile

    set_grads(model, 1)
    g0 = model.w.grad.clone()
    result0 = opt.generate(0, BATCH)
    d1 = lr(0) * g0
    torch.testing.assert_close(opt.momentum[0][0], d1)
    torch.testing.assert_close(model.w.detach(), w0 * (1 - lr(0) * 0.1))
    expected = compress(encode(d1, tile_w), 3)
    assert torch.equal(result0.tiles[0].indices, expected.indices)
    torch.testing.assert_close(result0.tiles[0].values, expected.values)

    # lookahead before step 1 uses lr(0) and the momentum that still holds the sent part
    w1 = model.w.detach().clone()
    opt.lookahead(1)
    torch.testing.assert_close(model.w.detach(), w1 - lr(0) * d1.sign())

    set_grads(model, 2)
    g1 = model.w.grad.clone()
    opt.generate(1, BATCH)
    sent = decode(densify(expected, 16), tile_w, (8, 8))
    d2 = 0.9 * (d1 - sent) + lr(1) * g1
    torch.testing.assert_close(opt.momentum[0][0], d2)
    torch.testing.assert_close(model.w.detach(), w1 * (1 - lr(1) * 0.1))
    assert tile_b == (4,) and model.b.shape == b0.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lookahead_is_undone_bit_exactly(dtype):
    model = Two(dtype)
    with torch.no_grad():
        model.w.mul_(1000.0)  # large weights: w - a + a != w in floating point
    opt = DistroOptimizer(
        model.named_parameters(),
        DistroConfig(compression_chunk=4, weight_decay=0.0),
        Constant(0.37),
    )
    set_grads(model, 1)
    opt.generate(0, BATCH)
    before = [p.detach().clone() for p in model.parameters()]
    opt.lookahead(1)
    assert not torch.equal(model.w.detach(), before[0])
    model.zero_grad()
    opt.generate(1, BATCH)
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.detach(), b)
    assert all(m.dtype == torch.float32 for m in opt.momentum)


@pytest.mark.parametrize("feedback", ["received", "unquantized"])
def test_error_feedback_with_1bit(feedback):
    """What stays in the momentum at the sent positions: v - mean|v| * sign(v) ("received",
    what peers' +-1 can carry) or 0 (Psyche: the unquantized values are removed)."""
    config = DistroConfig(
        compression_decay=1.0,
        compression_chunk=4,
        compression_topk=3,
        clip_grad_norm=None,
        quantize_1bit=True,
        error_feedback=feedback,
    )
    model = Two()
    opt = DistroOptimizer(model.named_parameters(), config, Constant(1.0))
    set_grads(model, 3)
    sent = opt.generate(0, BATCH).tiles[0]
    model.zero_grad(set_to_none=True)
    opt.generate(1, BATCH)  # no gradient, decay 1: only the feedback subtraction happens
    left = encode(opt.momentum[0], opt.layout.buckets[0].tile).gather(1, sent.indices)
    if feedback == "received":
        scale = sent.values.abs().mean(dim=1, keepdim=True)
        torch.testing.assert_close(left, sent.values - scale * sent.values.sign())
    else:
        torch.testing.assert_close(left, torch.zeros_like(left), atol=1e-6, rtol=0)


def test_gradient_clipping():
    config = DistroConfig(compression_chunk=4, clip_grad_norm=1.0, compression_decay=1.0)
    model = Two()
    opt = DistroOptimizer(model.named_parameters(), config, Constant(1.0))
    for p in model.parameters():
        p.grad = torch.full_like(p, 100.0)
    opt.generate(0, BATCH)
    total = torch.cat([m.reshape(-1) for m in opt.momentum]).norm()
    assert float(total) == pytest.approx(1.0, rel=1e-4)


def test_phase_misuse_and_empty_apply(caplog):
    model = Two()
    opt = DistroOptimizer(
        model.named_parameters(), DistroConfig(compression_chunk=4), Constant(0.1)
    )
    set_grads(model, 1)
    opt.generate(0, BATCH)
    opt.lookahead(1)
    with pytest.raises(RuntimeError, match="lookahead called twice"):
        opt.lookahead(1)
    with pytest.raises(RuntimeError, match="apply called between lookahead and generate"):
        opt.apply(1, [])
    opt.generate(1, BATCH)
    before = model.w.detach().clone()
    with caplog.at_level(logging.WARNING):
        opt.apply(2, [])
    assert torch.equal(model.w.detach(), before) and "no results" in caplog.text
    opt.reset_momentum()
    assert all(not m.any() for m in opt.momentum)
    with pytest.raises(ValueError, match="trainable"):
        DistroOptimizer([], DistroConfig(), Constant(0.1))


def test_state_round_trip_continues_identically(tmp_path):
    config = DistroConfig(compression_chunk=4, compression_topk=2)
    a, b = Two(), Two()
    opt_a = DistroOptimizer(a.named_parameters(), config, Constant(0.1))
    set_grads(a, 1)
    opt_a.generate(0, BATCH)
    torch.save(opt_a.state_dict(), tmp_path / "distro.pt")
    opt_b = DistroOptimizer(b.named_parameters(), config, Constant(0.1))
    opt_b.load_state_dict(torch.load(tmp_path / "distro.pt"))
    b.load_state_dict(a.state_dict())
    for model, opt in ((a, opt_a), (b, opt_b)):
        opt.lookahead(1)
        set_grads(model, 2)
        opt.generate(1, BATCH)
    assert all(torch.equal(x, y) for x, y in zip(opt_a.momentum, opt_b.momentum, strict=True))
    assert torch.equal(a.w, b.w)
    other = DistroOptimizer(
        Two().named_parameters(), DistroConfig(compression_chunk=2), Constant(0.1)
    )
    with pytest.raises(ValueError, match="different parameter layout"):
        other.load_state_dict(opt_a.state_dict())
