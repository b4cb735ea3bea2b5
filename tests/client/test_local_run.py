"""LocalRun's own housekeeping: a start that fails after the localnet came up stops it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from cohort.client.runtime.local_run import LocalRun, stop_process
from cohort.sbf import build


async def test_a_start_that_fails_after_the_localnet_is_up_stops_it(tmp_path: Path, monkeypatch):
    def broken(*args, **kwargs):
        raise build.BuildError("a program that does not build")

    monkeypatch.setattr(build, "build_all", broken)
    lr = LocalRun(root=tmp_path / "run")
    try:
        with pytest.raises(build.BuildError):
            async with lr:
                raise AssertionError("never entered")
        assert lr.localnet.poll() is not None  # stopped, not left running
    finally:
        if getattr(lr, "localnet", None) is not None:
            stop_process(lr.localnet)  # whatever happened above
