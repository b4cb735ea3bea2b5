"""Fixtures of the client tests: a whole run from real processes (localnet, deployed coordinator, `cohort
train` clients), with the demo config cut down for CI: short epochs of ~1 s rounds of a tiny Llama."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cohort.client.runtime.local_run import DEMO_CONFIG


def write_config(path: Path, **values: object) -> Path:
    """The demo config with some `key = value` lines changed (each key must occur once)."""
    text = DEMO_CONFIG.read_text()
    for key, value in values.items():
        pattern = re.compile(rf"^{key} = [^#\n]*", re.M)
        assert len(pattern.findall(text)) == 1, f"{key} is not a unique key of {DEMO_CONFIG.name}"
        literal = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        text = pattern.sub(f"{key} = {literal}  ", text)
    path.write_text(text)
    return path


@pytest.fixture
def ci_config(tmp_path: Path) -> Path:
    """Epochs of ~12 s of rounds; a client that went silent costs one 5 s round."""
    return write_config(tmp_path / "run.toml", epoch_time=14, max_round_train_time=5, warmup_time=12)
