"""Held-out loss and perplexity from a provider's validation split, a tensor or batches."""

from __future__ import annotations

import math

import pytest
import torch
from support.tiny_models import tiny_model

from cohort.client.data import BatchId, open_data_location
from cohort.client.model import EvalResult, evaluate


def test_evaluate_on_the_validation_split():
    model = tiny_model()
    validation = open_data_location("kjv", 64, split="validation")
    result = evaluate(model, validation, max_sequences=48, batch_size=16)
    assert isinstance(result, EvalResult) and result.tokens == 48 * 63
    assert math.isclose(result.perplexity, math.exp(result.loss))
    assert 4.0 < result.loss < 7.0  # untrained: about ln(256)
    tensor = validation.sequences(BatchId(0, 48))
    for same in (evaluate(model, tensor), evaluate(model, list(tensor.split(7)), max_sequences=48)):
        assert same.tokens == result.tokens  # same sequences, any form, any batching
        assert math.isclose(same.loss, result.loss, rel_tol=1e-5)
    assert model.training  # mode restored
    with pytest.raises(ValueError, match="at least one"):
        evaluate(model, [])
    assert evaluate(model, tensor, max_sequences=1).tokens == 63


def test_training_lowers_held_out_loss():
    model = tiny_model()
    train = open_data_location("kjv", 64)
    validation = open_data_location("kjv", 64, split="validation")
    before = evaluate(model, validation, 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(30):
        loss = model(
            input_ids=(t := train.sequences(BatchId(16 * step, 16 * step + 16))), labels=t
        ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    after = evaluate(model, validation, 32)
    assert after.loss < before.loss - 1.0 and after.perplexity < before.perplexity
