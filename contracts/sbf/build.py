"""Build every Solana program under contracts/: C → BPF objects (clang) → SBPF v0 .so (our linker), plus a
host shared library of each program's pure C for unit tests and Python callers (ctypes).

A program is a folder with a `program.toml` (its keys: `manifest.py`); e.g.

    [program]
    name = "coordinator"          # output: contracts/target/coordinator.so (+ .map)
    sources = ["src/**/*.c"]      # compiled for SBF, one object each, linked together
    include = ["src"]             # extra include folders (the SDK's include/ is always there)

    [host]                        # optional
    sources = ["src/core/*.c"]    # pure C (no syscalls) → contracts/target/host/libcoordinator.so

Rebuilds only what changed (a content hash of the compiler, flags, sources and headers per program).
Run: `python -m cohort.sbf.build` (or `cohort build`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import linker
from .manifest import ManifestError, ProgramManifest, find_manifests, read_manifest

SBF_DIR = Path(__file__).resolve().parent
CONTRACTS_DIR = SBF_DIR.parent
TARGET_DIR = CONTRACTS_DIR / "target"
SDK_INCLUDE = SBF_DIR / "include"

# Newest first: clang >= 18 takes -bpf-stack-size, giving Solana's real 4 KiB frames (older ones: 512 B).
CLANG_CANDIDATES = ("clang-19", "clang-20", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14",
                    "clang")  # fmt: skip
SBF_CFLAGS = ["-target", "bpfel", "-mcpu=v2", "-O2", "-ffreestanding", "-fno-builtin", "-nostdlib",
              "-fno-stack-protector", "-std=gnu17", "-Wall", "-Wextra", "-Werror",
              "-Wno-unused-parameter"]  # fmt: skip
STACK_FRAME_FLAGS = ["-mllvm", "-bpf-stack-size=4096"]
HOST_CFLAGS = ["-O2", "-fPIC", "-shared", "-std=gnu17", "-Wall", "-Wextra", "-Werror",
               "-Wno-unused-parameter", "-fvisibility=default"]  # fmt: skip


class BuildError(Exception):
    """A compile or link failed; the message carries the tool's output."""


@dataclass(frozen=True)
class Program:
    name: str
    root: Path
    sources: tuple[Path, ...]
    include: tuple[Path, ...]
    host_sources: tuple[Path, ...]
    manifest: ProgramManifest | None = (
        None  # the rest of its description: schema, shipping, keypair
    )

    @property
    def so_path(self) -> Path:
        return TARGET_DIR / f"{self.name}.so"

    @property
    def map_path(self) -> Path:
        return TARGET_DIR / f"{self.name}.map"

    @property
    def host_lib_path(self) -> Path:
        return TARGET_DIR / "host" / f"lib{self.name}.so"


def _glob(root: Path, patterns: list[str], what: str) -> tuple[Path, ...]:
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(root.glob(pattern))
        if not matches:
            raise BuildError(f"{root / 'program.toml'}: {what} pattern {pattern!r} matches no file")
        found += [m for m in matches if m not in found]
    return tuple(found)


def load_program(manifest: Path) -> Program:
    """Read a program.toml; every path in it is relative to its folder."""
    try:
        return _program(read_manifest(manifest))
    except ManifestError as e:
        raise BuildError(str(e)) from None


def _program(described: ProgramManifest) -> Program:
    root = described.root
    sources = _glob(root, list(described.sources), "sources")
    include = tuple(root / p for p in described.include)
    host_sources = _glob(root, list(described.host_sources), "host sources")
    return Program(described.name, root, sources, include, host_sources, described)


def find_programs(contracts_dir: Path = CONTRACTS_DIR) -> list[Program]:
    """Every program.toml under contracts/ (not in target/ or the toolchain itself)."""
    try:
        return [_program(m) for m in find_manifests(contracts_dir, skip=(TARGET_DIR, SBF_DIR))]
    except ManifestError as e:
        raise BuildError(str(e)) from None


@cache
def find_clang() -> str:
    """The C compiler for BPF: $COHORT_CLANG, or the newest clang on PATH."""
    override = os.environ.get("COHORT_CLANG")
    if override:
        if shutil.which(override) is None:
            raise BuildError(f"COHORT_CLANG={override} is not an executable on PATH")
        return override
    for candidate in CLANG_CANDIDATES:
        if shutil.which(candidate):
            return candidate
    raise BuildError("no clang found; run scripts/setup.sh (it installs clang-19)")


@cache
def sbf_cflags() -> tuple[str, ...]:
    """SBF compile flags, with 4 KiB stack frames when this clang supports them."""
    clang = find_clang()
    probe = subprocess.run(
        [clang, *SBF_CFLAGS, *STACK_FRAME_FLAGS, "-x", "c", "-c", "-", "-o", os.devnull],
        input=b"int f(void) { return 0; }\n", capture_output=True,
    )  # fmt: skip
    return tuple(SBF_CFLAGS + (STACK_FRAME_FLAGS if probe.returncode == 0 else []))


def _compiler_identity(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout


def _fingerprint(
    program: Program, compiler: str, flags: list[str], sources: tuple[Path, ...]
) -> str:
    """A hash of everything the output depends on: compiler, flags, sources, headers, toolchain."""
    h = hashlib.sha256()
    h.update(_compiler_identity(compiler).encode())
    h.update(" ".join(flags).encode())
    headers = [p for d in (SDK_INCLUDE, *program.include) for p in sorted(d.rglob("*.h"))]
    headers += sorted(program.root.rglob("*.h"))
    toolchain = sorted(SBF_DIR.glob("*.py"))
    for path in (*sources, *headers, *toolchain):
        h.update(str(path).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}".rstrip())


def _up_to_date(output: Path, stamp: Path, fingerprint: str) -> bool:
    return output.exists() and stamp.exists() and stamp.read_text() == fingerprint


def build_sbf(program: Program, *, force: bool = False) -> bool:
    """Compile and link one program to target/<name>.so. Returns False when it was already up to date."""
    clang = find_clang()
    flags = list(sbf_cflags()) + [f"-I{SDK_INCLUDE}"] + [f"-I{d}" for d in program.include]
    fingerprint = _fingerprint(program, clang, flags, program.sources)
    stamp = TARGET_DIR / "stamps" / f"{program.name}.sbf"
    if not force and _up_to_date(program.so_path, stamp, fingerprint):
        return False
    obj_dir = TARGET_DIR / "obj" / program.name
    obj_dir.mkdir(parents=True, exist_ok=True)
    objects = []
    for source in program.sources:
        relative = source.relative_to(program.root).with_suffix(".o")
        obj = obj_dir / "__".join(relative.parts)
        _run([clang, *flags, "-c", str(source), "-o", str(obj)])
        objects.append(obj)
    try:
        linker.link_files(objects, program.so_path, map_path=program.map_path, symtab=False)
    except (linker.LinkError, linker.CheckError, linker.elf.ElfError) as e:
        raise BuildError(f"linking {program.name}: {e}") from e
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(fingerprint)
    return True


def host_compiler() -> str:
    """$CC, else cc or gcc, else the clang found for BPF (which also targets the host)."""
    for candidate in (os.environ.get("CC"), "cc", "gcc"):
        if candidate and shutil.which(candidate):
            return candidate
    try:
        return find_clang()
    except BuildError:
        raise BuildError("no host C compiler found (set CC, or install gcc or clang)") from None


def build_host(program: Program, *, force: bool = False) -> bool:
    """Build the program's pure C as target/host/lib<name>.so. False when up to date or there is none."""
    if not program.host_sources:
        return False
    cc = host_compiler()
    flags = HOST_CFLAGS + [f"-I{SDK_INCLUDE}"] + [f"-I{d}" for d in program.include]
    fingerprint = _fingerprint(program, cc, flags, program.host_sources)
    stamp = TARGET_DIR / "stamps" / f"{program.name}.host"
    if not force and _up_to_date(program.host_lib_path, stamp, fingerprint):
        return False
    program.host_lib_path.parent.mkdir(parents=True, exist_ok=True)
    _run([cc, *flags, *map(str, program.host_sources), "-o", str(program.host_lib_path)])
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(fingerprint)
    return True


def _shown(path: Path) -> str:
    root = CONTRACTS_DIR.parent
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def build_all(
    names: list[str] | None = None,
    *,
    force: bool = False,
    log=print,
    contracts_dir: Path | None = None,
) -> list[Program]:
    """Build the named programs (all when None) under `contracts_dir` (default: contracts/) for SBF and the
    host; returns the programs built."""
    programs = find_programs(contracts_dir or CONTRACTS_DIR)
    if names:
        unknown = sorted(set(names) - {p.name for p in programs})
        if unknown:
            known = ", ".join(p.name for p in programs) or "none"
            raise BuildError(f"unknown program(s) {unknown}; programs under contracts/: {known}")
        programs = [p for p in programs if p.name in names]
    for program in programs:
        built = build_sbf(program, force=force)
        size = program.so_path.stat().st_size
        log(f"{program.name}: {_shown(program.so_path)} ({size} bytes)"
            f"{'' if built else ', up to date'}")  # fmt: skip
        if build_host(program, force=force):
            log(f"{program.name}: {_shown(program.host_lib_path)} (host)")
    return programs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cohort.sbf.build", description="Build the Solana programs under contracts/."
    )
    parser.add_argument("programs", nargs="*", help="program names (default: all)")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    try:
        build_all(args.programs or None, force=args.force)
    except BuildError as e:
        print(f"build: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
