"""Names a package loads on first use (PEP 562), so that importing it (a command line printing its help,
checking its options) does not pay for what those names import (torch, transformers)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str],
               namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:  # fmt: skip
    """The module-level `__getattr__` and `__dir__` of `package` (whose globals are `namespace`) that load
    each of `names` (name -> module, relative to the package) when first asked for, then keep it as a plain
    attribute."""

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
