"""The optional extras (``pip install 'simpletvm[service]'``): the words that name one when
its libraries are missing, here so that simpletvm and the packages above it say the same.
Standard library only: it runs before the extra's libraries are known to be there."""

from __future__ import annotations

import importlib.util


def install_hint(extra: str) -> str:
    return f"pip install 'simpletvm[{extra}]'"


def require(extra: str, modules: tuple[str, ...], what: str) -> None:
    """Raise ImportError naming ``extra`` when one of ``modules`` (import names) is
    missing, before any of them is imported."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"{what} needs {', '.join(missing)}: {install_hint(extra)}")
