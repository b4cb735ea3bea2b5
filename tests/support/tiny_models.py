"""Tiny models from the shared preset registry, for checkpoint, model and data tests."""

from __future__ import annotations

from cohort.client.model import build_model, config_for
from cohort.sdk.presets import MODEL_PRESETS


def tiny_model(preset: str = "llama-tiny", seed: int = 0, vocab_size: int = 256, **overrides):
    p = MODEL_PRESETS[preset]
    config = config_for(
        p.architecture, {**p.hf_config, **overrides}, vocab_size=vocab_size, max_seq_len=64
    )
    return build_model(config, seed=seed)
