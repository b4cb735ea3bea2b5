"""The coordinator's built files — its IDL, its SBF program and its host library — wherever cohort runs.

An installed wheel carries them as package data in `cohort/sdk/artifacts/` (setup.py copies them in when the
wheel is built), so creating, steering and watching runs needs neither the checkout nor a C compiler. In a
checkout they are read where the build writes them (`contracts/coordinator/idl.json`, `contracts/target/`),
so an edit followed by `cohort build` is what the next command uses.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import ConfigError

PACKAGE_FOLDER = "artifacts"
PROGRAM_NAME = "coordinator"
IDL_FILE = "idl.json"
PROGRAM_FILE = f"{PROGRAM_NAME}.so"
HOST_FILE = f"lib{PROGRAM_NAME}.so"

# the checkout's layout: sdk/cohort/sdk/artifacts.py → the repository root is three folders up
CHECKOUT_CONTRACTS = Path(__file__).resolve().parents[3] / "contracts"
CHECKOUT_FILES = {
    IDL_FILE: CHECKOUT_CONTRACTS / PROGRAM_NAME / IDL_FILE,
    PROGRAM_FILE: CHECKOUT_CONTRACTS / "target" / PROGRAM_FILE,
    HOST_FILE: CHECKOUT_CONTRACTS / "target" / "host" / HOST_FILE,
}


def in_checkout() -> bool:
    """Running from a source checkout (the program's C sources are beside the SDK)?"""
    return (CHECKOUT_CONTRACTS / PROGRAM_NAME / "program.toml").is_file()


def packaged(name: str) -> Path | None:
    """A file shipped inside the installed package, if this install has one."""
    found = resources.files("cohort.sdk").joinpath(PACKAGE_FOLDER, name)
    return Path(str(found)) if found.is_file() else None


def find(name: str) -> Path:
    """The checkout's file when running from a checkout, else the packaged one."""
    if in_checkout():
        path = CHECKOUT_FILES[name]
        if path.is_file():
            return path
        raise ConfigError(f"{path} is not built yet: run `cohort build`")
    path = packaged(name)
    if path is None:
        raise ConfigError(
            f"this cohort install lacks {name} (a wheel built without `cohort build` first?)"
        )
    return path


def idl_path() -> Path:
    return find(IDL_FILE)


def host_library() -> Path:
    """The coordinator's pure C built for this machine (loaded with ctypes; never compiled on demand)."""
    return find(HOST_FILE)


def program(*, build: bool = True) -> Path:
    """The SBF program to deploy. In a checkout it is (re)built first unless `build=False`."""
    if build and in_checkout():
        from cohort.sbf import build as sbf_build

        try:
            (built,) = sbf_build.build_all([PROGRAM_NAME], log=lambda _: None)
        except sbf_build.BuildError as e:
            raise ConfigError(f"build failed: {e}") from None
        return built.so_path
    return find(PROGRAM_FILE)
