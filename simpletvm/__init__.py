"""SimpleTVM: autotune deep-learning models with Apache TVM in a few chained calls.

The names below load on first use, so that ``simpletvm.exit_codes`` and the command
lines start without numpy, pandas or TVM (``superb --help`` is instant)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simpletvm.lazy import lazy_attributes

if TYPE_CHECKING:
    from simpletvm.api import SimpleTVM
    from simpletvm.context import BenchmarkingContext, new_run_id
    from simpletvm.errors import (
        FlowError,
        FrontendError,
        IncompatibleModuleError,
        ModelImportError,
        RunNotFoundError,
        SimpleTVMError,
        WrongAnswerError,
    )
    from simpletvm.flow import FlowState
    from simpletvm.store import RunStore

_HOMES = {
    "BenchmarkingContext": "simpletvm.context",
    "FlowError": "simpletvm.errors",
    "FlowState": "simpletvm.flow",
    "FrontendError": "simpletvm.errors",
    "IncompatibleModuleError": "simpletvm.errors",
    "ModelImportError": "simpletvm.errors",
    "RunNotFoundError": "simpletvm.errors",
    "RunStore": "simpletvm.store",
    "SimpleTVM": "simpletvm.api",
    "SimpleTVMError": "simpletvm.errors",
    "WrongAnswerError": "simpletvm.errors",
    "new_run_id": "simpletvm.context",
}
__all__ = [  # the names of _HOMES, spelled out for linters and type checkers
    "BenchmarkingContext",
    "FlowError",
    "FlowState",
    "FrontendError",
    "IncompatibleModuleError",
    "ModelImportError",
    "RunNotFoundError",
    "RunStore",
    "SimpleTVM",
    "SimpleTVMError",
    "WrongAnswerError",
    "new_run_id",
]
__version__ = "0.1.0"


__getattr__ = lazy_attributes("simpletvm", _HOMES, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
