"""Errors raised by SimpleTVM; each message names the problem and the fix."""


class SimpleTVMError(Exception):
    """Base class of every error SimpleTVM raises on purpose."""


class FlowError(SimpleTVMError):
    """A step was called before the step it depends on (e.g. build() before from_model())."""


class ModelImportError(SimpleTVMError):
    """A model source could not be read or converted into Relax."""


class IncompatibleModuleError(SimpleTVMError):
    """A saved module was built for another target or host than the current context."""


class RunNotFoundError(SimpleTVMError):
    """A run id names nothing in the run store."""
