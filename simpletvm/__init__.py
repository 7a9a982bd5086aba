"""SimpleTVM: autotune deep-learning models with Apache TVM in a few chained calls."""

from .api import SimpleTVM
from .context import BenchmarkingContext, new_run_id
from .errors import (
    FlowError,
    IncompatibleModuleError,
    ModelImportError,
    RunNotFoundError,
    SimpleTVMError,
)
from .store import RunStore

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
