"""SimpleTVM: autotune deep-learning models with Apache TVM in a few chained calls."""

from simpletvm.api import SimpleTVM
from simpletvm.context import BenchmarkingContext, new_run_id
from simpletvm.errors import (
    FlowError,
    IncompatibleModuleError,
    ModelImportError,
    RunNotFoundError,
    SimpleTVMError,
)
from simpletvm.store import RunStore

__all__ = [
    "BenchmarkingContext",
    "FlowError",
    "IncompatibleModuleError",
    "ModelImportError",
    "RunNotFoundError",
    "RunStore",
    "SimpleTVM",
    "SimpleTVMError",
    "new_run_id",
]
__version__ = "0.1.0"
