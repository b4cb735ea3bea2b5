"""The one mapping from an on-chain run config to a client's training settings (cohort.sdk.presets)."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.errors import ConfigError
from cohort.sdk.presets import MODEL_PRESETS, training_spec
from cohort.sdk.run_config import parse_run_file, validate

from .conftest import EXAMPLE


@pytest.fixture(scope="module")
def core() -> CoordinatorCore:
    return CoordinatorCore()


def _run_file(core: CoordinatorCore, **model):
    data = tomllib.loads(EXAMPLE.read_text())
    for key, value in model.items():
        section, name = key.split("__") if "__" in key else ("model", key)
        data[section][name] = value
    return parse_run_file(data, core.idl)


def test_the_example_maps_to_settings_every_client_reads_the_same(core):
    run_file = _run_file(core)
    validate(run_file, core)
    spec = training_spec(run_file.metadata, run_file.model)
    assert spec.architecture == "HfLlama" and spec.hf_config == MODEL_PRESETS["llama-20m"].hf_config
    assert spec.vocab_size == 256 and spec.max_seq_len == 512 and spec.data_location == "kjv"
    # what the chain does not carry is fixed for every client
    assert (spec.distro.value_dtype, spec.distro.error_feedback) == ("bf16", "received")


def test_clip_zero_means_off(core):
    run_file = _run_file(core)
    off = dataclasses.replace(run_file.model.optimizer, clip_grad_norm=0.0)
    spec = training_spec(run_file.metadata, dataclasses.replace(run_file.model, optimizer=off))
    assert spec.distro.clip_grad_norm is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"preset": "llama-7t"}, "unknown model preset 'llama-7t'"),
        ({"architecture": "HfDeepseek"}, "preset 'llama-20m' is a HfLlama model, not HfDeepseek"),
        ({"metadata__vocab_size": 32_000}, "data source 'kjv' uses a tokenizer of 256 tokens"),
    ],
)
def test_run_create_refuses_what_no_client_could_train(core, change, message):
    with pytest.raises(ConfigError, match=message):
        validate(_run_file(core, **change), core)
