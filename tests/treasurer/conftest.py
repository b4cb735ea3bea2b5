"""Fixtures of the treasurer tests: the coordinator and the treasurer built once per session."""

from __future__ import annotations

import pytest
from support.treasurer_chain import TOKEN_PROGRAMS, AuthorizedChain, TreasurerChain

from cohort.sbf import build
from cohort.sdk.coordinator_core import CoordinatorCore, load_idl
from cohort.sdk.idl import Idl
from cohort.sdk.treasurer import load_idl as load_treasurer_idl


@pytest.fixture(scope="session")
def idl() -> Idl:
    return load_idl()


@pytest.fixture(scope="session")
def coordinator_elf() -> bytes:
    (program,) = build.build_all(["coordinator"], log=lambda _: None)
    return program.so_path.read_bytes()


@pytest.fixture(scope="session")
def treasurer_elf() -> bytes:
    (program,) = build.build_all(["treasurer"], log=lambda _: None)
    return program.so_path.read_bytes()


@pytest.fixture(scope="session")
def treasurer_idl() -> Idl:
    return load_treasurer_idl()


@pytest.fixture(scope="session")
def core(coordinator_elf, idl) -> CoordinatorCore:
    return CoordinatorCore(idl=idl)


@pytest.fixture(scope="session")
def compute_units() -> dict[str, int]:
    """The most CU each treasurer instruction took in any test, printed at the end of the session."""
    table: dict[str, int] = {}
    yield table
    if table:
        print("\ntreasurer CU: " + ", ".join(f"{k} {v}" for k, v in sorted(table.items())))


@pytest.fixture(params=sorted(TOKEN_PROGRAMS))
def tc(
    request, coordinator_elf, treasurer_elf, idl, treasurer_idl, compute_units
) -> TreasurerChain:
    """A fresh chain with both programs, for each token program (SPL Token and Token-2022)."""
    chain = TreasurerChain(
        AuthorizedChain(coordinator_elf, idl),
        treasurer_elf,
        treasurer_idl,
        TOKEN_PROGRAMS[request.param],
    )
    yield chain
    for name, cu in chain.cu.items():
        compute_units[f"{name} ({request.param})"] = max(
            compute_units.get(f"{name} ({request.param})", 0), cu
        )
