"""A program's schema file, loaded: its ProgramAbi and its type, instruction, event and error tables."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .schema import Enum, Error, Instruction, ProgramAbi, Struct


class SchemaError(Exception):
    """A schema file is missing a table, or its types cannot be laid out the same in C and Borsh."""


@dataclass(frozen=True)
class Schema:
    path: Path
    abi: ProgramAbi
    constants: dict[str, int]
    enums: tuple[Enum, ...]
    structs: tuple[
        Struct, ...
    ]  # every struct, in C declaration order (a struct after the ones it uses)
    account_types: tuple[Struct, ...]
    arg_types: tuple[Struct, ...]
    events: tuple[Struct, ...]
    instructions: tuple[Instruction, ...]
    errors: tuple[Error, ...]

    def length(self, n: int | str) -> int:
        return n if isinstance(n, int) else self.constants[n]


_TABLES = (
    "CONSTANTS",
    "ENUMS",
    "STRUCTS",
    "ACCOUNT_TYPES",
    "ARG_TYPES",
    "EVENTS",
    "INSTRUCTIONS",
    "ERRORS",
)


def _import(path: Path) -> ModuleType:
    # a private module name per file: two programs' `schema.py` must not shadow each other
    name = f"_cohort_schema_{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SchemaError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module while the file runs
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def load_schema(path: Path) -> Schema:
    """Run a schema file and read its tables (`PROGRAM`, a ProgramAbi, and the upper-case tables)."""
    module = _import(path)
    missing = [t for t in ("PROGRAM", *_TABLES) if not hasattr(module, t)]
    if missing:
        raise SchemaError(f"{path}: defines no {', '.join(missing)}")
    if not isinstance(module.PROGRAM, ProgramAbi):
        raise SchemaError(f"{path}: PROGRAM is not a ProgramAbi")
    return Schema(
        path=path,
        abi=module.PROGRAM,
        constants=dict(module.CONSTANTS),
        enums=tuple(module.ENUMS),
        structs=tuple(module.STRUCTS),
        account_types=tuple(module.ACCOUNT_TYPES),
        arg_types=tuple(module.ARG_TYPES),
        events=tuple(module.EVENTS),
        instructions=tuple(module.INSTRUCTIONS),
        errors=tuple(module.ERRORS),
    )
