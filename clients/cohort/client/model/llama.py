"""Llama-style causal language models built from a `transformers` config (Hugging Face format)."""

from __future__ import annotations

from transformers import LlamaConfig

# name -> (hidden, layers, heads, intermediate, default vocab, tied embeddings)
PRESETS: dict[str, tuple[int, int, int, int, int, bool]] = {
    "tiny": (128, 4, 4, 384, 256, False),  # ~0.9M params: CI-sized, byte vocabulary
    "small": (256, 6, 8, 768, 256, False),  # ~4.8M params
    "100m": (768, 12, 12, 2048, 32000, True),  # ~110M params
    "1b": (2048, 16, 16, 8192, 32000, False),  # ~1.2B params, the DisTrO report's 1.2B shape
}


def llama_config(
    preset: str, vocab_size: int | None = None, max_seq_len: int = 2048
) -> LlamaConfig:
    """The `LlamaConfig` of a named preset (see PRESETS), optionally with another vocabulary."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {sorted(PRESETS)}")
    hidden, layers, heads, intermediate, default_vocab, tied = PRESETS[preset]
    vocab = default_vocab if vocab_size is None else vocab_size
    if vocab < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab}")
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_seq_len,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-5,
        attn_implementation="sdpa",
    )
