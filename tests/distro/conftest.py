"""Shared fixtures for the DisTrO tests: CPU threads, and a tiny model with gradients."""

from __future__ import annotations

import os

import pytest
import torch

# CI has 2 cores; more threads than cores only adds contention
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def tiny_model() -> torch.nn.Module:
    """A ~0.9M-parameter Llama with byte vocabulary, seeded."""
    from cohort.client.model import build_model, llama_config

    return build_model(llama_config("tiny"), seed=0)


def _fill_grads(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = (torch.randn(p.shape, generator=generator) * 0.01).to(p.dtype)


@pytest.fixture
def fill_grads():
    """fill_grads(model, seed): a reproducible random gradient per parameter (a stand-in backward)."""
    return _fill_grads
