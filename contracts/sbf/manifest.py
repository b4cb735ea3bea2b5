"""A program's description, from its `program.toml`: what the build compiles, what codegen generates from
its schema, and what the SDK ships and deploys. Discovery reads every `contracts/**/program.toml`, so a new
program is a new folder, never new code.

    [program]
    name = "coordinator"          # output: contracts/target/coordinator.so (+ .map)
    sources = ["src/**/*.c"]      # compiled for SBF, one object each, linked together
    include = ["src"]             # extra include folders (the SDK's include/ is always there)
    ship = true                   # in the wheel and deployed by `cohort deploy` (examples leave it out)
    keypair = "coordinator-keypair.json"   # the program keypair's file name (default: <name>-keypair.json)

    [host]                        # optional
    sources = ["src/core/*.c"]    # pure C (no syscalls) → contracts/target/host/libcoordinator.so

    [abi]                         # optional: the program's schema and what is generated from it
    schema = "schema.py"
    idl = "idl.json"                              # default
    header = "src/generated/abi.h"                # default
    accounts_header = "src/generated/ix_accounts.h"  # default
    python = "../../sdk/cohort/sdk/abi/coordinator.py"   # optional: typed instructions for the SDK

Every path is relative to the manifest's folder.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "program.toml"


class ManifestError(Exception):
    """A program.toml is not valid TOML or misses what a program needs."""


@dataclass(frozen=True)
class AbiFiles:
    """A program's schema and the files generated from it."""

    schema: Path
    idl: Path
    header: Path
    accounts_header: Path
    python: Path | None


@dataclass(frozen=True)
class ProgramManifest:
    name: str
    path: Path  # the program.toml
    sources: tuple[str, ...]  # glob patterns
    include: tuple[str, ...]
    host_sources: tuple[str, ...]
    ship: bool
    keypair_file: str
    abi: AbiFiles | None

    @property
    def root(self) -> Path:
        return self.path.parent


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{where} must be a list of strings")
    return tuple(value)


def _file_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or "/" in value or value in (".", ".."):
        raise ManifestError(f"{where} must be a file name")
    return value


def _abi(table: object, root: Path, where: Path) -> AbiFiles | None:
    if table is None:
        return None
    if not isinstance(table, dict) or not isinstance(table.get("schema"), str):
        raise ManifestError(f"{where}: [abi] needs a `schema` path")

    def path(key: str, default: str) -> Path:
        value = table.get(key, default)
        if not isinstance(value, str):
            raise ManifestError(f"{where}: [abi] {key} must be a path")
        return (root / value).resolve()

    python = table.get("python")
    if python is not None and not isinstance(python, str):
        raise ManifestError(f"{where}: [abi] python must be a path")
    return AbiFiles(
        schema=path("schema", ""),
        idl=path("idl", "idl.json"),
        header=path("header", "src/generated/abi.h"),
        accounts_header=path("accounts_header", "src/generated/ix_accounts.h"),
        python=None if python is None else (root / python).resolve(),
    )


def read_manifest(path: Path) -> ProgramManifest:
    """Parse a program.toml (sources are patterns here; the build expands them)."""
    try:
        config = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{path}: {e}") from e
    program = config.get("program")
    if not isinstance(program, dict) or not isinstance(program.get("name"), str):
        raise ManifestError(f"{path}: needs a [program] table with a `name` string")
    name = program["name"]
    if not name.replace("_", "").isalnum():
        raise ManifestError(
            f"{path}: program name {name!r} must be letters, digits and underscores"
        )
    ship = program.get("ship", False)
    if not isinstance(ship, bool):
        raise ManifestError(f"{path}: [program] ship must be true or false")
    return ProgramManifest(
        name=name,
        path=path,
        sources=_strings(program.get("sources", ["src/**/*.c"]), f"{path}: [program] sources"),
        include=_strings(program.get("include", []), f"{path}: [program] include"),
        host_sources=_strings(config.get("host", {}).get("sources", []), f"{path}: [host] sources"),
        ship=ship,
        keypair_file=_file_name(
            program.get("keypair", f"{name}-keypair.json"), f"{path}: [program] keypair"
        ),
        abi=_abi(config.get("abi"), path.parent, path),
    )


def find_manifests(contracts_dir: Path, skip: tuple[Path, ...] = ()) -> list[ProgramManifest]:
    """Every program.toml under `contracts_dir` (outside the folders in `skip`), by path; names are unique."""
    paths = sorted(
        p for p in contracts_dir.rglob(MANIFEST) if not any(s in p.parents for s in skip)
    )
    manifests = [read_manifest(p) for p in paths]
    names = [m.name for m in manifests]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ManifestError(f"two programs share the name(s) {sorted(duplicates)}")
    return manifests
