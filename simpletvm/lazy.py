"""Names of a package loaded on first use (PEP 562), so that importing the package (for
its options, its errors, ``--help``) does not import TVM or TensorFlow."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, homes: dict[str, str], namespace: dict) -> Callable:
    """A module ``__getattr__`` for ``package`` that imports ``homes[name]`` when ``name``
    is first read and keeps the value in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        namespace[name] = value
        return value

    return __getattr__
