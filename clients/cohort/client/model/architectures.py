"""A `transformers` config from a run's architecture and preset: the model room's side of the one mapping.

The run's TrainingSpec (cohort.sdk.presets) names an architecture and the keyword arguments of its config
class; the vocabulary and context length come from the run. Building the model is then `build_model(config)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from transformers import LlamaConfig, PretrainedConfig


def _llama(kwargs: Mapping[str, Any], vocab_size: int, max_seq_len: int) -> PretrainedConfig:
    return LlamaConfig(
        **kwargs,
        vocab_size=vocab_size,
        max_position_embeddings=max_seq_len,
        attn_implementation="sdpa",
    )


ARCHITECTURES: dict[str, Callable[[Mapping[str, Any], int, int], PretrainedConfig]] = {
    "HfLlama": _llama,
}


def config_for(
    architecture: str, hf_config: Mapping[str, Any], *, vocab_size: int, max_seq_len: int
) -> PretrainedConfig:
    """The config of a model of `architecture` with the preset's `hf_config` keyword arguments."""
    make = ARCHITECTURES.get(architecture)
    if make is None:
        raise ValueError(
            f"architecture {architecture!r} is not supported by this client "
            f"(supported: {', '.join(sorted(ARCHITECTURES))})"
        )
    if vocab_size < 2 or max_seq_len < 2:
        raise ValueError(f"vocab_size and max_seq_len must be >= 2, got {vocab_size}, {max_seq_len}")
    return make(hf_config, vocab_size, max_seq_len)
