"""Generate each program's ABI files from its schema (the `[abi]` table of its program.toml): the C header,
the C header of account indices, the Anchor IDL and the SDK's typed Python module.

    python -m cohort.sbf.codegen                 # every program with a schema
    python -m cohort.sbf.codegen coordinator     # the named ones
    python -m cohort.sbf.codegen --check         # exit 1 if a generated file is out of date

Generation is deterministic: the same schema gives the same bytes, so `--check` is a test.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from .abi.c_header import abi_header, accounts_header
from .abi.idl import idl_text
from .abi.loaded import Schema, SchemaError, load_schema
from .abi.python import python_module
from .manifest import AbiFiles, ManifestError, ProgramManifest, find_manifests

SBF_DIR = Path(__file__).resolve().parent
CONTRACTS_DIR = SBF_DIR.parent
REPO = CONTRACTS_DIR.parent
DRIVER = "python -m cohort.sbf.codegen"


@dataclass(frozen=True)
class Generated:
    """One program's generated files: path → the text it must hold."""

    program: ProgramManifest
    generated_by: str
    files: dict[Path, str]

    def stale(self) -> list[Path]:
        return [p for p, text in self.files.items() if not p.is_file() or p.read_text() != text]


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def generated_by(program: ProgramManifest) -> str:
    """What regenerates a program's files, as their first line says: the program's own codegen.py when it
    has one (a shortcut for this driver), else this driver."""
    own = program.root / "codegen.py"
    return _shown(own.resolve()) if own.is_file() else DRIVER


def generate(program: ProgramManifest) -> Generated:
    abi: AbiFiles | None = program.abi
    if abi is None:
        raise SchemaError(f"{program.path}: has no [abi] schema")
    schema: Schema = load_schema(abi.schema)
    if schema.abi.name != program.name:
        raise SchemaError(f"{abi.schema}: PROGRAM names {schema.abi.name!r}, not {program.name!r}")
    by = generated_by(program)
    files = {
        abi.header: abi_header(schema, by),
        abi.accounts_header: accounts_header(schema, by),
        abi.idl: idl_text(schema),
    }
    if abi.python is not None:
        files[abi.python] = python_module(schema, by)
    return Generated(program, by, files)


def programs_with_schemas(
    names: list[str] | None = None, contracts_dir: Path = CONTRACTS_DIR
) -> list[ProgramManifest]:
    found = [
        m for m in find_manifests(contracts_dir, skip=(contracts_dir / "target", SBF_DIR)) if m.abi
    ]
    if names:
        unknown = sorted(set(names) - {m.name for m in found})
        if unknown:
            known = ", ".join(m.name for m in found) or "none"
            raise ManifestError(f"no schema for program(s) {unknown}; programs with one: {known}")
        found = [m for m in found if m.name in names]
    return found


def main(argv: list[str] | None = None, contracts_dir: Path = CONTRACTS_DIR) -> int:
    parser = argparse.ArgumentParser(prog=DRIVER, description=__doc__.splitlines()[0])
    parser.add_argument(
        "programs", nargs="*", help="program names (default: every one with a schema)"
    )
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    args = parser.parse_args(argv)
    try:
        everything = [
            generate(m) for m in programs_with_schemas(args.programs or None, contracts_dir)
        ]
    except (ManifestError, SchemaError) as e:
        print(f"codegen: error: {e}", file=sys.stderr)
        return 1
    status = 0
    for generated in everything:
        for path in generated.stale():
            if args.check:
                print(f"{_shown(path)} is stale: run {generated.generated_by}")
                status = 1
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(generated.files[path])
            print(f"wrote {_shown(path)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
