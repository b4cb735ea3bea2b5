"""DeepSeek-V3 (MLA, optional MoE) and HfAuto models from the preset registry."""

from __future__ import annotations

import pytest
import torch
from support.tiny_models import tiny_model
from transformers import DeepseekV3ForCausalLM, GPT2LMHeadModel

from cohort.client.model import config_for, lm_loss, parameter_digest
from cohort.sdk.presets import MODEL_PRESETS


@pytest.mark.parametrize("preset", ["deepseek-tiny", "deepseek-tiny-moe"])
def test_deepseek_tiny_trains_forward_and_backward(preset):
    model = tiny_model(preset)
    assert isinstance(model, DeepseekV3ForCausalLM)
    assert (
        model.model.layers[0].self_attn.kv_a_proj_with_mqa.out_features == 32 + 16
    )  # latent + rope
    tokens = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = lm_loss(model, tokens)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 0.3  # it learns (memorises the batch)
    grads = [p for p in model.parameters() if p.requires_grad]
    assert grads and sum(p.numel() for p in grads) < 1.5e6
    assert parameter_digest(tiny_model(preset)) == parameter_digest(tiny_model(preset))


def test_hf_auto_builds_any_causal_lm():
    model = tiny_model("auto-gpt2-tiny")
    assert isinstance(model, GPT2LMHeadModel) and model.config.n_positions == 64
    tokens = torch.randint(0, 256, (2, 64))
    lm_loss(model, tokens).backward()
    with pytest.raises(ValueError, match="model_type"):
        config_for("HfAuto", {"n_layer": 2}, vocab_size=256, max_seq_len=64)
    with pytest.raises(ValueError, match="HfAuto"):
        config_for("HfAuto", {"model_type": "no-such-model"}, vocab_size=256, max_seq_len=64)
    with pytest.raises(ValueError, match="no causal language model"):
        config_for("HfAuto", {"model_type": "clip"}, vocab_size=256, max_seq_len=64)
    with pytest.raises(ValueError, match="not supported"):
        config_for("Torchtitan", {}, vocab_size=256, max_seq_len=64)


@pytest.mark.parametrize("name", ["deepseek-1b", "deepseek-v3"])
def test_large_presets_have_their_size(name):
    """Built on the meta device: shapes only, no memory. A stack of identical layers grows by the same
    count per layer, so the model is built with the dense layers and one and two of the last kind, and the
    rest is counted from the difference (the whole 671B model's 15,000 expert modules took 19 s to build)."""
    p = MODEL_PRESETS[name]
    from transformers import AutoModelForCausalLM

    layers = p.hf_config["num_hidden_layers"]
    dense = min(p.hf_config.get("first_k_dense_replace", 0), layers - 1)

    def parameters(depth: int) -> int:
        config = config_for(
            p.architecture,
            {**p.hf_config, "num_hidden_layers": depth},
            vocab_size=32000 if name == "deepseek-1b" else 129280,
            max_seq_len=4096,
        )
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        return sum(t.numel() for t in model.parameters())

    shallow = parameters(dense + 1)
    billions = (shallow + (layers - dense - 1) * (parameters(dense + 2) - shallow)) / 1e9
    expected = {"deepseek-1b": (1.0, 1.3), "deepseek-v3": (660, 690)}[name]
    assert expected[0] < billions < expected[1], billions
