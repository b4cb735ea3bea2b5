"""The coordinator's built files are found, never compiled on demand: the checkout's build when running
from a checkout, the packaged copies otherwise, and one clear line when neither exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from cohort.sbf import build
from cohort.sdk import artifacts
from cohort.sdk.coordinator_core import CoordinatorCore
from cohort.sdk.errors import ConfigError


@pytest.fixture
def no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("something tried to compile C")

    monkeypatch.setattr(build, "build_all", refuse)


def test_a_missing_host_library_is_a_hint_not_a_compile(monkeypatch, no_compiling, tmp_path: Path):
    missing = tmp_path / "libcoordinator.so"
    monkeypatch.setitem(artifacts.CHECKOUT_FILES, artifacts.HOST_FILE, missing)
    with pytest.raises(
        ConfigError, match=r"libcoordinator\.so is not built yet: run `cohort build`"
    ):
        CoordinatorCore()


def test_the_checkout_build_is_used_in_a_checkout(no_compiling):
    assert artifacts.in_checkout()
    assert artifacts.host_library() == artifacts.CHECKOUT_FILES[artifacts.HOST_FILE]
    assert artifacts.idl_path() == artifacts.CHECKOUT_FILES[artifacts.IDL_FILE]
    assert artifacts.program(build=False) == artifacts.CHECKOUT_FILES[artifacts.PROGRAM_FILE]


def test_outside_a_checkout_only_packaged_files_count(monkeypatch, no_compiling):
    monkeypatch.setattr(artifacts, "in_checkout", lambda: False)
    # this editable install has no packaged copies (a wheel does: tests/packaging/test_wheel.py)
    assert artifacts.packaged(artifacts.IDL_FILE) is None
    with pytest.raises(ConfigError, match=r"this cohort install lacks idl\.json"):
        artifacts.idl_path()
    with pytest.raises(ConfigError, match=r"lacks coordinator\.so"):
        artifacts.program()  # no build attempt either
