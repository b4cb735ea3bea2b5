"""The memory a member needs (cohort.sdk.sizing): parameter counts equal the models the client builds, the
parts add up, `run create` and `run presets` say it, and presets no member can hold are marked."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from typing import Any

import pytest
from click.testing import CliRunner

from cohort.sdk import sizing
from cohort.sdk.cli import cli
from cohort.sdk.cli_run import _memory_line
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import MODEL_PRESETS, DistroSpec, LrSpec, TrainingSpec
from cohort.sdk.run_config import parse_run_file
from cohort.sdk.sizing import (
    BYTES_PER_PARAM,
    DISTRO_WORKING_CAP,
    MAX_MEMBER_BYTES,
    default_micro_batch_size,
    estimate_disk,
    estimate_memory,
    parameter_count,
    run_estimate,
)

from .conftest import EXAMPLE

_DISTRO = DistroSpec(0.999, 64, 32, 0.0, 1.0, True)
_LR = LrSpec("Constant", 1e-3, 1e-3, 0, 0, 100)


def _spec(
    architecture: str, hf_config: Mapping[str, Any], vocab: int = 256, seq: int = 512
) -> TrainingSpec:
    return TrainingSpec("custom", architecture, hf_config, vocab, seq, "kjv", _DISTRO, _LR, 0)


def _built_parameters(spec: TrainingSpec) -> int:
    """The parameters of the model the client builds, on the meta device (nothing allocated)."""
    pytest.importorskip("torch")
    from cohort.client.model.architectures import config_for
    from cohort.client.model.build import build_model

    config = config_for(
        spec.architecture, spec.hf_config, vocab_size=spec.vocab_size, max_seq_len=spec.max_seq_len
    )
    return sum(p.numel() for p in build_model(config, device="meta").parameters())


# DeepSeek-V3 cut to 5 layers (3 dense, 2 of 256 experts): its every kind of block, built in a moment
_V3_CUT = {**MODEL_PRESETS["deepseek-v3"].hf_config, "num_hidden_layers": 5}
_VARIANTS = {
    "llama-gqa-bias": ("HfLlama", {**MODEL_PRESETS["llama-20m"].hf_config, "num_key_value_heads": 1,
                                   "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False}),
    "llama-head-dim": ("HfLlama", {**MODEL_PRESETS["llama-tiny"].hf_config, "head_dim": 48, "num_key_value_heads": 2}),
    "deepseek-v3-cut": ("HfDeepseek", _V3_CUT),
    "deepseek-q-lora-tied": ("HfDeepseek", {**MODEL_PRESETS["deepseek-tiny-moe"].hf_config, "q_lora_rank": 48,
                                            "tie_word_embeddings": True}),
    "gpt2-untied": ("HfAuto", {**MODEL_PRESETS["auto-gpt2-tiny"].hf_config, "tie_word_embeddings": False}),
}  # fmt: skip
_SHAPES = {
    name: (p.architecture, p.hf_config)
    for name, p in MODEL_PRESETS.items()
    if name != "deepseek-v3"
}


@pytest.mark.parametrize("vocab, seq", [(256, 512), (32000, 2048)])
@pytest.mark.parametrize("name", [*_SHAPES, *_VARIANTS])
def test_parameter_counts_equal_the_built_models(name: str, vocab: int, seq: int):
    architecture, hf_config = {**_SHAPES, **_VARIANTS}[name]
    spec = _spec(architecture, hf_config, vocab, seq)
    assert parameter_count(spec) == _built_parameters(spec)


def test_deepseek_v3_is_its_published_671b():
    # the full model on meta takes ~20 s to build: its 5-layer cut above checks every block, this the sum
    spec = _spec("HfDeepseek", MODEL_PRESETS["deepseek-v3"].hf_config, vocab=129280, seq=4096)
    assert round(parameter_count(spec) / 1e9) == 671


def test_an_unknown_auto_model_has_no_estimate():
    spec = _spec("HfAuto", {"model_type": "opt", "hidden_size": 64})
    assert parameter_count(spec) is None
    assert estimate_memory(spec, micro_batch_size=1, verification=True) is None


def test_the_parts_add_up_and_follow_the_table():
    spec = _spec("HfLlama", MODEL_PRESETS["llama-20m"].hf_config)
    on = estimate_memory(spec, micro_batch_size=4, verification=True)
    off = estimate_memory(spec, micro_batch_size=4, verification=False)
    assert on is not None and off is not None
    n = on.parameters
    parts = [
        on.weights,
        on.gradients,
        on.optimizer,
        on.distro_working,
        on.activations,
        on.verification,
    ]
    assert on.total == sum(parts)
    assert on.weights == 4 * n and on.gradients == 4 * n
    assert on.optimizer == int(n * (BYTES_PER_PARAM["momentum"] + BYTES_PER_PARAM["lookahead"]))
    assert on.verification == int(n * BYTES_PER_PARAM["verification"]) and off.verification == 0
    assert on.total - off.total == on.verification
    assert on.bytes_per_param == pytest.approx((on.total - on.activations) / n)
    # activations scale with the micro-batch, nothing else does
    eight = estimate_memory(spec, micro_batch_size=8, verification=True)
    assert eight is not None and eight.activations == pytest.approx(2 * on.activations, rel=1e-6)
    assert eight.total - eight.activations == on.total - on.activations
    # DisTrO's working set is bounded whatever the model
    big = estimate_memory(_spec("HfLlama", MODEL_PRESETS["llama-1b"].hf_config), micro_batch_size=1,
                          verification=False)  # fmt: skip
    assert big is not None and big.distro_working == DISTRO_WORKING_CAP


def test_deepseek_v3_is_marked_untrainable_and_the_others_are_not():
    for name, preset in MODEL_PRESETS.items():
        estimate = estimate_memory(_spec(preset.architecture, preset.hf_config), micro_batch_size=1,
                                   verification=False)  # fmt: skip
        assert estimate is not None, name
        if name == "deepseek-v3":
            assert estimate.total > MAX_MEMBER_BYTES
            assert estimate.untrainable and "no single member" in estimate.untrainable
            assert "×80 GB" in estimate.untrainable
        else:
            assert estimate.untrainable is None, name


def test_run_presets_lists_every_preset_and_marks_the_untrainable():
    result = CliRunner().invoke(cli, ["run", "presets"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in MODEL_PRESETS:
        assert name in result.output
    marked = [line for line in result.output.splitlines() if "no single member" in line]
    assert len(marked) == 1 and "deepseek-v3" in marked[0], result.output
    rows = json.loads(CliRunner().invoke(cli, ["run", "presets", "--json"]).output)
    assert {r["preset"] for r in rows} == set(MODEL_PRESETS)
    assert [r["preset"] for r in rows if r["untrainable"]] == ["deepseek-v3"]


def test_run_create_says_what_a_member_needs():
    core = CoordinatorCore()
    run_file = parse_run_file(tomllib.loads(EXAMPLE.read_text()), core.idl)
    line = _memory_line(run_file)
    share = default_micro_batch_size(run_file.config)
    assert share == 11  # the example: batches of up to 32 sequences over 3 members
    assert (
        line.startswith("a member needs about ") and f"per micro-batch of {share} sequences" in line
    )
    assert "verification " in line and "verification off" not in line  # the example verifies 5%
    unverified = dataclasses.replace(
        run_file, config=dataclasses.replace(run_file.config, verification_percent=0)
    )
    assert "verification off" in _memory_line(unverified)
    assert "on disk about" in line and "weight snapshots for checks" in line
    assert "(checkpoints)" in _memory_line(unverified)
    v3 = dataclasses.replace(run_file, model=dataclasses.replace(run_file.model, architecture="HfDeepseek",
                                                                  preset="deepseek-v3"))  # fmt: skip
    assert "no single member can hold this" in _memory_line(v3)
    spec = _spec("HfLlama", MODEL_PRESETS["llama-20m"].hf_config)
    estimate = run_estimate(spec, run_file.config)
    assert estimate is not None and estimate.micro_batch_size == share


def test_the_sizing_module_does_not_import_torch():
    code = "import cohort.sdk.sizing, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_lean_memory_and_sharded_ranks_are_sized_as_they_run():
    """--lean-memory keeps each layer's input and one layer's values; a rank of a member over N processes
    holds its share of every per-parameter part, plus what FSDP gathers whole while it computes (the
    parameters outside the layers and one layer), and the activations of its share of the micro-batch."""
    spec = _spec("HfLlama", MODEL_PRESETS["llama-1b"].hf_config, vocab=32_000, seq=2048)
    plain = estimate_memory(spec, micro_batch_size=4, verification=True)
    lean = estimate_memory(spec, micro_batch_size=4, verification=True, checkpointed=True)
    assert plain is not None and lean is not None
    assert (
        lean.activations < plain.activations / 2
        and lean.total - lean.activations == plain.total - plain.activations
    )
    eight = estimate_memory(spec, micro_batch_size=8, verification=True, ranks=8)
    assert eight is not None and eight.ranks == 8 and eight.gathered > 0
    n = eight.parameters
    assert eight.weights == int(-(-n // 8) * BYTES_PER_PARAM["weights"])
    one_sequence = estimate_memory(spec, micro_batch_size=1, verification=True)
    assert (
        one_sequence is not None and eight.activations == one_sequence.activations
    )  # 8 sequences over 8 ranks
    assert eight.total < plain.total / 3
    assert "each of a member's 8 ranks" in eight.summary() and eight.to_json()["ranks"] == 8
    with pytest.raises(ValueError, match="ranks"):
        estimate_memory(spec, micro_batch_size=1, verification=False, ranks=0)


def test_the_disk_a_member_keeps_follows_the_client_and_the_runs_verification():
    """sizing cannot import the client (it loads torch): its disk constants are held equal to the client's
    here; a state a check is drawn on (its step's or the next one's) is kept its full window."""
    from cohort.client.runtime import trainer, weights

    assert (
        sizing.SNAPSHOTS_KEPT == trainer.KEPT_SNAPSHOTS
        and sizing.STATES_KEPT == trainer.KEPT_STATES
    )
    assert sizing.CHECKPOINTS_KEPT == weights.KEEP_LAST + 1  # and one fetched as a joiner
    assert sizing.STATES_PENDING == CoordinatorCore().idl.constants["CHECK_SEED_LAG"] + 2
    n = 1_000_000
    off, few, all_ = (estimate_disk(n, p) for p in (0, 5, 100))
    assert off.total == 3 * 4 * n and off.snapshots == off.states == 0
    assert few.snapshots == 11 * 4 * n and few.states == int(
        (6 + 6) * 4.25 * n
    )  # 1.6 drawn + 3 sigma
    assert all_.states == int(16 * 4.25 * n) and all_.total > few.total > off.total
    with pytest.raises(ValueError):
        estimate_disk(n, 101)
