"""Fixtures of the coordinator tests (the harness itself is tests/support/coordinator_chain.py)."""

from __future__ import annotations

import pytest
from support.coordinator_chain import Chain

from cohort.sbf import build
from cohort.sdk.coordinator_core import CoordinatorCore, load_idl
from cohort.sdk.idl import Idl


@pytest.fixture(scope="session")
def idl() -> Idl:
    return load_idl()


@pytest.fixture(scope="session")
def coordinator_elf() -> bytes:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    return program.so_path.read_bytes()


@pytest.fixture(scope="session")
def core(coordinator_elf, idl) -> CoordinatorCore:
    return CoordinatorCore(idl=idl)


@pytest.fixture
def chain(coordinator_elf, idl) -> Chain:
    return Chain(coordinator_elf, idl)
