"""Each shipped program's built files — its IDL, its SBF program and its host library — wherever cohort runs.

The programs are the `contracts/**/program.toml` that say `ship = true` (the coordinator, ...). An installed
wheel carries their files as package data in `cohort/sdk/artifacts/<program>/` (setup.py copies them in, the
program.toml included, when the wheel is built), so creating, steering and watching runs needs neither the
checkout nor a C compiler. In a checkout they are read where the build writes them (the IDL beside the
program's schema, `contracts/target/`), so an edit followed by `cohort build` is what the next command uses.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from cohort.sbf.manifest import (
    MANIFEST,
    ManifestError,
    ProgramManifest,
    find_manifests,
    read_manifest,
)

from .errors import ConfigError

PACKAGE_FOLDER = "artifacts"
PROGRAM_NAME = "coordinator"  # the program a command means when it names none
IDL_FILE = "idl.json"
PROGRAM_FILE = f"{PROGRAM_NAME}.so"
HOST_FILE = f"lib{PROGRAM_NAME}.so"

# the checkout's layout: sdk/cohort/sdk/artifacts.py → the repository root is three folders up
CHECKOUT_CONTRACTS = Path(__file__).resolve().parents[3] / "contracts"
CHECKOUT_TARGET = CHECKOUT_CONTRACTS / "target"


def in_checkout() -> bool:
    """Running from a source checkout (the program's C sources are beside the SDK)?"""
    return (CHECKOUT_CONTRACTS / PROGRAM_NAME / MANIFEST).is_file()


def program_file(name: str) -> str:
    return f"{name}.so"


def host_file(name: str) -> str:
    return f"lib{name}.so"


def _manifests() -> list[ProgramManifest]:
    """The shipped programs' descriptions: the checkout's program.toml files, or the packaged copies."""
    try:
        if in_checkout():
            found = find_manifests(
                CHECKOUT_CONTRACTS, skip=(CHECKOUT_TARGET, CHECKOUT_CONTRACTS / "sbf")
            )
            return [m for m in found if m.ship]
        folder = resources.files("cohort.sdk").joinpath(PACKAGE_FOLDER)
        if not folder.is_dir():
            return []
        packaged = sorted(Path(str(p)) / MANIFEST for p in folder.iterdir() if p.is_dir())
        return [read_manifest(p) for p in packaged if p.is_file()]
    except ManifestError as e:
        raise ConfigError(str(e)) from None


def programs() -> list[ProgramManifest]:
    """Every program cohort ships and deploys, by name."""
    return sorted(_manifests(), key=lambda m: m.name)


def describe(name: str) -> ProgramManifest:
    """One shipped program's description; a ConfigError naming the known ones otherwise."""
    found = {m.name: m for m in _manifests()}
    if name not in found:
        raise ConfigError(f"no program {name!r}; cohort ships {', '.join(sorted(found)) or 'none'}")
    return found[name]


@cache
def checkout_files(name: str) -> dict[str, Path]:
    """Where a checkout keeps a program's files: its IDL (its program.toml says where), its SBF program and
    its host library. One dict per program, so tests can point an entry elsewhere."""
    idl = CHECKOUT_CONTRACTS / name / IDL_FILE
    if in_checkout():
        described = describe(name)
        if described.abi is not None:
            idl = described.abi.idl
    return {
        IDL_FILE: idl,
        program_file(name): CHECKOUT_TARGET / program_file(name),
        host_file(name): CHECKOUT_TARGET / "host" / host_file(name),
    }


def __getattr__(attribute: str) -> dict[str, Path]:
    # CHECKOUT_FILES: the default program's checkout files (read lazily: discovery parses program.toml)
    if attribute == "CHECKOUT_FILES":
        return checkout_files(PROGRAM_NAME)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


def packaged(name: str, program: str = PROGRAM_NAME) -> Path | None:
    """A file of `program` shipped inside the installed package, if this install has one."""
    found = resources.files("cohort.sdk").joinpath(PACKAGE_FOLDER, program, name)
    return Path(str(found)) if found.is_file() else None


def find(name: str, program: str = PROGRAM_NAME) -> Path:
    """The checkout's file when running from a checkout, else the packaged one."""
    if in_checkout():
        path = checkout_files(program).get(name)
        if path is None:
            raise ConfigError(f"the {program} program has no file {name}")
        if path.is_file():
            return path
        raise ConfigError(f"{path} is not built yet: run `cohort build`")
    path = packaged(name, program)
    if path is None:
        raise ConfigError(
            f"this cohort install lacks {name} of the {program} program "
            "(a wheel built without `cohort build` first?)"
        )
    return path


def idl_path(program: str = PROGRAM_NAME) -> Path:
    return find(IDL_FILE, program)


def host_library(program: str = PROGRAM_NAME) -> Path:
    """A program's pure C built for this machine (loaded with ctypes; never compiled on demand)."""
    return find(host_file(program), program)


def program(*, build: bool = True, name: str = PROGRAM_NAME) -> Path:
    """The SBF program to deploy. In a checkout it is (re)built first unless `build=False`."""
    if build and in_checkout():
        from cohort.sbf import build as sbf_build

        try:
            (built,) = sbf_build.build_all(
                [name], log=lambda _: None, contracts_dir=CHECKOUT_CONTRACTS
            )
        except sbf_build.BuildError as e:
            raise ConfigError(f"build failed: {e}") from None
        return built.so_path
    return find(program_file(name), name)
