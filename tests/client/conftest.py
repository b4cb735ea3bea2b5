"""Fixtures of the client tests: a whole run from real processes (localnet, deployed coordinator, `cohort
train` clients), with the demo config cut down for CI: short epochs of ~1 s rounds of a tiny Llama."""

from __future__ import annotations

from pathlib import Path

import pytest

from cohort.client.runtime.local_run import write_config


@pytest.fixture
def ci_config(tmp_path: Path) -> Path:
    """Epochs of ~12 s of rounds; a client that went silent costs one 5 s round."""
    return write_config(
        tmp_path / "run.toml", epoch_time=14, max_round_train_time=5, warmup_time=12
    )
