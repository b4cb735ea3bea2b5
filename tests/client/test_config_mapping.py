"""One mapping from the on-chain config to the client: every config `run create` accepts maps to a client
configuration that trains (a step, an apply), and what the chain leaves open is fixed the same for all."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from cohort.client.runtime.local_run import write_config
from cohort.client.runtime.trainer import LocalReplica, distro_config
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.presets import training_spec
from cohort.sdk.run_config import load_run_file, packaged_config

# variants of the demo config, each one a run `run create` accepts; small so each trains in well under a second
VARIANTS = {
    "demo": {},
    "constant lr, no clipping, no momentum carried": {
        "lr_schedule__kind": "Constant",
        "clip_grad_norm": 0.0,
        "compression_decay": 0.0,
    },
    "linear lr, bf16 values instead of 1-bit": {
        "lr_schedule__kind": "Linear",
        "quantize_1bit": False,
    },
    "warmup-stable-decay, weight decay": {
        "lr_schedule__kind": "WarmupStableDecay",
        "stable_steps": 20,
        "weight_decay": 0.1,
    },
    "one coefficient per 8x8 tile": {"compression_chunk": 8, "compression_topk": 1},
    "small preset": {"preset": "llama-small", "max_seq_len": 32},
}


@pytest.fixture(scope="module")
def core() -> CoordinatorCore:
    return CoordinatorCore()


@pytest.mark.parametrize("changes", VARIANTS.values(), ids=VARIANTS.keys())
def test_every_accepted_config_trains(changes: dict, core: CoordinatorCore, tmp_path: Path):
    path = write_config(tmp_path / "run.toml", **{"max_seq_len": 16, **changes})
    run_file = load_run_file(path, core)  # the program's own rules: what `run create` accepts
    spec = training_spec(run_file.metadata, run_file.model)
    trainer = LocalReplica(spec, seed=0)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    out = trainer.train(1, 0, 4)
    assert out.loss > 0 and out.tokens == 4 * spec.max_seq_len and len(out.payload) > 0
    trainer.apply(1, [out.payload])
    assert any(
        not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True)
    )


def test_the_example_run_maps_to_a_buildable_client(core: CoordinatorCore):
    run_file = load_run_file(packaged_config("example-run.toml"), core)
    spec = training_spec(run_file.metadata, run_file.model)
    config = distro_config(spec.distro)
    assert (config.value_dtype, config.error_feedback, config.clip_grad_norm) == (
        "bf16",
        "received",
        1.0,
    )


def test_two_clients_read_the_chain_config_alike(core: CoordinatorCore, tmp_path: Path):
    run_file = load_run_file(write_config(tmp_path / "run.toml", quantize_1bit=False), core)
    a, b = (training_spec(run_file.metadata, dataclasses.replace(run_file.model)) for _ in range(2))
    assert a == b and distro_config(a.distro) == distro_config(b.distro)
