"""Building a fresh model from a `transformers` config, reproducibly."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel


def build_model(
    config: PretrainedConfig, seed: int = 0, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """A freshly initialised causal LM of `config`'s class (Llama, DeepSeek-V3, ...), built on
    `device`; the same seed and device give bit-identical weights."""
    device = torch.device(device)
    rng_devices = []  # fork_rng wants CUDA device indices
    if device.type == "cuda":
        rng_devices = [torch.cuda.current_device() if device.index is None else device.index]
    with torch.random.fork_rng(devices=rng_devices), device:
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config)
