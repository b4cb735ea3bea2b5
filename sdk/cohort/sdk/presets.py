"""The one mapping from a run's on-chain config to what a training client does with it.

`run create` validates with `training_spec` before anything is sent, and the client builds its model, data
and optimizer from the very same `TrainingSpec`, so a config the chain accepts is one every client can train
and two clients can never read it differently. Pure data: no torch here (the SDK never imports it).

Settings the chain does not carry are fixed here for everyone: DisTrO's wire value dtype when 1-bit
quantization is off (bf16) and its error-feedback mode ("received": remove what peers got); a run whose
clients used different defaults would reject each other's payloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .errors import ConfigError
from .models import ModelConfig, RunMetadata


@dataclass(frozen=True)
class ModelPreset:
    """A named model shape. `hf_config` holds the keyword arguments of the architecture's `transformers`
    config class; the vocabulary size and context length come from the run (metadata.vocab_size,
    model.max_seq_len), so one preset serves any tokenizer."""

    architecture: str  # HfLlama | HfDeepseek | HfAuto (the on-chain Architecture enum)
    hf_config: Mapping[str, Any]
    description: str


def _llama(hidden: int, layers: int, heads: int, intermediate: int, tied: bool, about: str):
    return ModelPreset(
        "HfLlama",
        MappingProxyType(
            {
                "hidden_size": hidden,
                "num_hidden_layers": layers,
                "num_attention_heads": heads,
                "num_key_value_heads": heads,
                "intermediate_size": intermediate,
                "tie_word_embeddings": tied,
                "rms_norm_eps": 1e-5,
            }
        ),
        about,
    )


def _deepseek(hidden, layers, heads, intermediate, q_lora, kv_lora, head_dims, moe, about):
    """DeepSeek-V3 (multi-head latent attention); `moe` = (first MoE layer, experts, experts per
    token, expert width) or None for dense MLPs."""
    nope, rope, v = head_dims
    first_moe, experts, per_token, expert_width = moe or (layers, 1, 1, intermediate)
    return ModelPreset(
        "HfDeepseek",
        MappingProxyType(
            {
                "hidden_size": hidden,
                "num_hidden_layers": layers,
                "num_attention_heads": heads,
                "num_key_value_heads": heads,
                "intermediate_size": intermediate,
                "q_lora_rank": q_lora,
                "kv_lora_rank": kv_lora,
                "qk_nope_head_dim": nope,
                "qk_rope_head_dim": rope,
                "v_head_dim": v,
                "first_k_dense_replace": first_moe,
                "n_routed_experts": experts,
                "num_experts_per_tok": per_token,
                "moe_intermediate_size": expert_width,
                "n_shared_experts": 1,
                "n_group": 8 if experts >= 64 else 1,
                "topk_group": 4 if experts >= 64 else 1,
                "tie_word_embeddings": False,
                "rms_norm_eps": 1e-6 if hidden >= 4096 else 1e-5,
            }
        ),
        about,
    )


MODEL_PRESETS: dict[str, ModelPreset] = {
    "llama-tiny": _llama(
        128, 4, 4, 384, False, "~0.9M parameters with a byte vocabulary: CPU and CI sized"
    ),
    "llama-small": _llama(256, 6, 8, 768, False, "~4.8M parameters with a byte vocabulary"),
    "llama-20m": _llama(448, 8, 7, 1216, True, "~20M parameters besides the embeddings"),
    "llama-100m": _llama(768, 12, 12, 2048, True, "~85M parameters besides the embeddings"),
    "llama-1b": _llama(
        2048, 16, 16, 8192, False, "~1.2B parameters: the DisTrO report's 1.2B shape"
    ),
    **{
        name: _deepseek(*shape)
        for name, shape in {
            # hidden, layers, heads, intermediate, q_lora, kv_lora, (nope, rope, v) head dims, MoE, about
            "deepseek-tiny": (
                128,
                4,
                4,
                384,
                None,
                32,
                (32, 16, 32),
                None,
                "~0.9M parameters, MLA, dense: CPU and CI sized",
            ),
            "deepseek-tiny-moe": (
                128,
                4,
                4,
                384,
                None,
                32,
                (32, 16, 32),
                (1, 4, 2, 96),
                "~1M parameters, MLA, 4 experts from layer 1",
            ),
            "deepseek-1b": (
                2048,
                16,
                16,
                8192,
                None,
                512,
                (128, 64, 128),
                None,
                "~1.2B parameters, MLA, dense (DeepSeek-V2-Lite attention)",
            ),
            "deepseek-v3": (
                7168,
                61,
                128,
                18432,
                1536,
                512,
                (128, 64, 128),
                (3, 256, 8, 2048),
                "DeepSeek-V3's own 671B shape (MLA + 256 experts)",
            ),
        }.items()
    },
    # HfAuto: any transformers causal LM, `model_type` naming its config class
    "auto-gpt2-tiny": ModelPreset(
        "HfAuto",
        MappingProxyType({"model_type": "gpt2", "n_embd": 128, "n_layer": 4, "n_head": 4}),
        "~0.9M parameters, GPT-2 through AutoModelForCausalLM",
    ),
}

# data sources built into the client, and the vocabulary of the tokenizer each implies
BUILTIN_DATA: dict[str, int] = {"kjv": 256, "pydoc": 256}


@dataclass(frozen=True)
class DistroSpec:
    """DisTrO's options as every client must use them (names as in cohort.client.distro.DistroConfig)."""

    compression_decay: float
    compression_chunk: int
    compression_topk: int
    weight_decay: float
    clip_grad_norm: float | None  # None = no clipping (0 on chain)
    quantize_1bit: bool
    value_dtype: str = "bf16"
    error_feedback: str = "received"


@dataclass(frozen=True)
class LrSpec:
    kind: str  # Constant | Linear | Cosine | WarmupStableDecay
    base_lr: float
    final_lr: float
    warmup_steps: int
    stable_steps: int
    total_steps: int


@dataclass(frozen=True)
class TrainingSpec:
    """Everything a client needs to train a run, derived from its on-chain config alone."""

    preset: str
    architecture: str
    hf_config: Mapping[str, Any]
    vocab_size: int
    max_seq_len: int
    data_location: str
    distro: DistroSpec
    lr: LrSpec
    cold_start_warmup_steps: int


def training_spec(metadata: RunMetadata, model: ModelConfig) -> TrainingSpec:
    """The client's view of a run config; ConfigError names what no client could train."""
    preset = MODEL_PRESETS.get(model.preset)
    if preset is None:
        raise ConfigError(
            f"[model].preset: unknown model preset {model.preset!r}; "
            f"known presets: {', '.join(sorted(MODEL_PRESETS))}"
        )
    if preset.architecture != model.architecture:
        raise ConfigError(
            f"[model].architecture: preset {model.preset!r} is a {preset.architecture} model, "
            f"not {model.architecture}"
        )
    vocab = metadata.vocab_size
    if vocab < 2:
        raise ConfigError(f"[metadata].vocab_size: must be at least 2, got {vocab}")
    builtin_vocab = BUILTIN_DATA.get(model.data_location)
    if builtin_vocab is not None and vocab != builtin_vocab:
        raise ConfigError(
            f"[metadata].vocab_size: data source {model.data_location!r} uses a tokenizer of "
            f"{builtin_vocab} tokens, but the run says {vocab}"
        )
    if model.max_seq_len < 2:
        raise ConfigError(f"[model].max_seq_len: must be at least 2, got {model.max_seq_len}")
    o, s = model.optimizer, model.lr_schedule
    distro = DistroSpec(
        compression_decay=o.compression_decay,
        compression_chunk=o.compression_chunk,
        compression_topk=o.compression_topk,
        weight_decay=o.weight_decay,
        clip_grad_norm=o.clip_grad_norm if o.clip_grad_norm > 0 else None,
        quantize_1bit=o.quantize_1bit,
    )
    lr = LrSpec(s.kind, s.base_lr, s.final_lr, s.warmup_steps, s.stable_steps, s.total_steps)
    return TrainingSpec(
        preset=model.preset,
        architecture=model.architecture,
        hf_config=preset.hf_config,
        vocab_size=vocab,
        max_seq_len=model.max_seq_len,
        data_location=model.data_location,
        distro=distro,
        lr=lr,
        cold_start_warmup_steps=model.cold_start_warmup_steps,
    )
