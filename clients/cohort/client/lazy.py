"""Names a package loads on first use (PEP 562), so that importing it (a command line printing its help,
checking its options) does not pay for what those names import (torch, transformers)."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str],
               namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:  # fmt: skip
    """The module-level `__getattr__` and `__dir__` of `package` (whose globals are `namespace`) that load
    each of `names` (name -> module, relative to the package) when first asked for, then keep it as a plain
    attribute. A name may not be a submodule's too: importing that submodule (from anywhere) would bind the
    package's attribute to the module, and `from package import name` would then give the module."""
    clashing = sorted(n for n in names if importlib.util.find_spec(f"{package}.{n}") is not None)
    if clashing:
        raise ImportError(f"{package}: lazily loaded names {clashing} are also submodules of it")

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
