"""Run config files (TOML): parsed into the on-chain config types and validated before anything is sent.

Sections mirror the program's structs — `[run]` (id, checkpointers), `[metadata]`, `[config]` (timing,
batch sizes, clients, witnesses, steps, join policy), `[model]` with `[model.checkpoint]`,
`[model.lr_schedule]` and `[model.optimizer]` (DisTrO) — and keys are the on-chain field names, so an error
names exactly the field to fix. Validation has two layers: types and sizes from the IDL (checked here), then
the program's own rules, run by the coordinator's host build (the same C code as on chain). The package
ships two configs (`packaged_config`): example-run.toml, every key documented (`cohort run example` prints
it), and demo-run.toml, the demo's.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solders.pubkey import Pubkey

from .coordinator_core import CoordinatorCore
from .errors import ConfigError
from .idl import Idl
from .models import (
    ENUM_FIELDS,
    Checkpoint,
    DistroConfig,
    LrSchedule,
    ModelConfig,
    Progress,
    RunConfig,
    RunMetadata,
    to_idl,
)
from .presets import training_spec

PACKAGED_CONFIGS = ("example-run.toml", "demo-run.toml")


def packaged_config(name: str) -> Path:
    """The path of a run config that ships with the package (a checkout's or an installed wheel's)."""
    if name not in PACKAGED_CONFIGS:
        raise ValueError(f"no packaged config {name!r} (there are: {', '.join(PACKAGED_CONFIGS)})")
    return Path(__file__).resolve().parent / "configs" / name


_INT_RANGES = {
    "u8": (0, 2**8 - 1),
    "u16": (0, 2**16 - 1),
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
    "i64": (-(2**63), 2**63 - 1),
}
_F32_MAX = 3.4028234663852886e38
_NESTED = {"checkpoint": Checkpoint, "lr_schedule": LrSchedule, "optimizer": DistroConfig}


@dataclass(frozen=True)
class RunFile:
    """A parsed, validated run config file."""

    run_id: str
    checkpointers: tuple[Pubkey, ...]
    metadata: RunMetadata
    config: RunConfig
    model: ModelConfig
    progress: Progress = field(default_factory=Progress)
    path: Path | None = None


def _field_types(idl: Idl, struct: str) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in idl.types[struct]["fields"]}


def _value(idl: Idl, type_: Any, value: Any, where: str, name: str) -> Any:
    """Check one TOML value against its IDL type; returns it converted for the dataclass."""
    if isinstance(type_, str) and type_ in _INT_RANGES:
        lo, hi = _INT_RANGES[type_]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(f"{where}: expected an integer from {lo} to {hi}, got {value!r}")
        return value
    if type_ == "f32":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value) or abs(value) > _F32_MAX:
            raise ConfigError(f"{where}: must be a finite 32-bit float, got {value!r}")
        return float(value)
    if type_ == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(type_, dict) and "defined" in type_ and name in ENUM_FIELDS:
        variants = [v["name"] for v in idl.types[type_["defined"]["name"]]["variants"]]
        by_lower = {v.lower(): v for v in variants}
        if not isinstance(value, str) or value.lower() not in by_lower:
            raise ConfigError(f"{where}: must be one of {', '.join(variants)}, got {value!r}")
        return by_lower[value.lower()]
    if isinstance(type_, dict) and "array" in type_ and type_["array"][0] == "u8":
        capacity = type_["array"][1]
        if name == "weights_sha256":
            try:
                raw = bytes.fromhex(value) if isinstance(value, str) else None
            except ValueError:
                raw = None
            if raw is None or len(raw) != capacity:
                raise ConfigError(f"{where}: expected {2 * capacity} hex digits, got {value!r}")
            return raw
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        size = len(value.encode())
        if size > capacity or "\0" in value:
            raise ConfigError(
                f"{where}: at most {capacity} bytes of UTF-8 without NUL, got {size} bytes"
            )
        return value
    raise ConfigError(f"{where}: unsupported field type {type_}")  # pragma: no cover - schema drift


def _section(
    idl: Idl, cls: type, table: Any, where: str, defaults: dict[str, Any] | None = None
) -> Any:
    """A config dataclass from a TOML table: unknown keys, missing keys and types checked."""
    if not isinstance(table, dict):
        raise ConfigError(f"[{where}]: expected a table, got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ConfigError(
            f"[{where}]: unknown key {unknown[0]!r} (known keys: {', '.join(fields)})"
        )
    types = _field_types(idl, cls.__name__)
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        path = f"[{where}].{name}"
        if name not in table:
            if defaults and name in defaults:
                kwargs[name] = defaults[name]
                continue
            if f.default is dataclasses.MISSING:
                raise ConfigError(f"{path}: missing (required)")
            continue
        nested = _NESTED.get(name)
        if nested is not None:
            inner = (
                {"total_steps": defaults["total_steps"]}
                if defaults and nested is LrSchedule
                else None
            )
            kwargs[name] = _section(idl, nested, table[name], f"{where}.{name}", inner)
        else:
            kwargs[name] = _value(idl, types[name], table[name], path, name)
    return cls(**kwargs)


def parse_run_file(data: dict[str, Any], idl: Idl, path: Path | None = None) -> RunFile:
    """Parse a run config's TOML tables (types and sizes; the program's rules come in `validate`)."""
    known = {"run", "metadata", "config", "model"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown section [{unknown[0]}] (sections: {', '.join(sorted(known))})")
    for section in ("run", "config", "model"):
        if section not in data:
            raise ConfigError(f"[{section}]: missing section")
    run = data["run"]
    if not isinstance(run, dict):
        raise ConfigError("[run]: expected a table")
    extra = sorted(set(run) - {"id", "checkpointers"})
    if extra:
        raise ConfigError(f"[run]: unknown key {extra[0]!r} (known keys: id, checkpointers)")
    max_checkpointers, run_id_len = idl.constants["MAX_CHECKPOINTERS"], idl.constants["RUN_ID_LEN"]
    run_id = run.get("id")
    if not isinstance(run_id, str) or not 1 <= len(run_id.encode()) <= run_id_len or "\0" in run_id:
        raise ConfigError(f"[run].id: must be 1 to {run_id_len} bytes of UTF-8, got {run_id!r}")
    checkpointers_raw = run.get("checkpointers", [])
    if not isinstance(checkpointers_raw, list) or len(checkpointers_raw) > max_checkpointers:
        raise ConfigError(
            f"[run].checkpointers: expected a list of at most {max_checkpointers} wallet addresses"
        )
    checkpointers = []
    for i, key in enumerate(checkpointers_raw):
        try:
            checkpointers.append(Pubkey.from_string(str(key)))
        except ValueError:
            raise ConfigError(
                f"[run].checkpointers[{i}]: {key!r} is not a base58 address"
            ) from None
    config = _section(idl, RunConfig, data["config"], "config")
    metadata = _section(idl, RunMetadata, data.get("metadata", {}), "metadata")
    model = _section(
        idl, ModelConfig, data["model"], "model", defaults={"total_steps": config.total_steps}
    )
    return RunFile(run_id, tuple(checkpointers), metadata, config, model, path=path)


def validate(run_file: RunFile, core: CoordinatorCore) -> None:
    """The program's own rules (same C code as on chain); raises ConfigError naming the rule."""
    where = f"{run_file.path}: " if run_file.path else ""
    checks = (
        ("config", core.check_config(to_idl(run_file.config))),
        ("model", core.check_model(to_idl(run_file.model))),
        ("model", core.check_model_fits_config(to_idl(run_file.model), to_idl(run_file.config))),
        ("metadata", core.check_metadata(to_idl(run_file.metadata))),
    )
    for section, violation in checks:
        if violation is not None:
            raise ConfigError(f"{where}[{section}] {violation.rule} ({violation.error})")
    try:  # and what a training client can do with it (the mapping every client uses)
        training_spec(run_file.metadata, run_file.model)
    except ConfigError as e:
        raise ConfigError(f"{where}{e}") from None


def load_run_file(path: str | Path, core: CoordinatorCore) -> RunFile:
    """Read, parse and validate a run config file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no run config at {path}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    try:
        run_file = parse_run_file(data, core.idl, path)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    validate(run_file, core)
    return run_file
