"""A `transformers` config from a run's architecture and preset: the model room's side of the one mapping.

The run's TrainingSpec (cohort.sdk.presets) names an architecture and the keyword arguments of its config
class; the vocabulary and context length come from the run. Building the model is then `build_model(config)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from transformers import (
    MODEL_FOR_CAUSAL_LM_MAPPING,
    AutoConfig,
    DeepseekV3Config,
    LlamaConfig,
    PretrainedConfig,
)


def _llama(kwargs: Mapping[str, Any], vocab_size: int, max_seq_len: int) -> PretrainedConfig:
    return LlamaConfig(
        **kwargs,
        vocab_size=vocab_size,
        max_position_embeddings=max_seq_len,
        attn_implementation="sdpa",
    )


def _deepseek(kwargs: Mapping[str, Any], vocab_size: int, max_seq_len: int) -> PretrainedConfig:
    """DeepSeek-V3: multi-head latent attention (MLA), optionally mixture-of-experts layers."""
    return DeepseekV3Config(
        **kwargs,
        vocab_size=vocab_size,
        max_position_embeddings=max_seq_len,
        attn_implementation="sdpa",
    )


def _auto(kwargs: Mapping[str, Any], vocab_size: int, max_seq_len: int) -> PretrainedConfig:
    """Any `transformers` causal LM: `model_type` picks the config class, the rest are its kwargs
    (`max_position_embeddings` reaches the class's own name for it through its attribute map)."""
    kwargs = dict(kwargs)
    model_type = kwargs.pop("model_type", None)
    if not isinstance(model_type, str):
        raise ValueError("an HfAuto preset names its transformers model_type")
    try:
        config = AutoConfig.for_model(
            model_type, **kwargs, vocab_size=vocab_size, max_position_embeddings=max_seq_len
        )
    except ValueError as e:
        raise ValueError(f"HfAuto: {e}") from None
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(f"HfAuto: model_type {model_type!r} has no causal language model")
    return config


ARCHITECTURES: dict[str, Callable[[Mapping[str, Any], int, int], PretrainedConfig]] = {
    "HfLlama": _llama,
    "HfDeepseek": _deepseek,
    "HfAuto": _auto,
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
        raise ValueError(
            f"vocab_size and max_seq_len must be >= 2, got {vocab_size}, {max_seq_len}"
        )
    return make(hf_config, vocab_size, max_seq_len)
