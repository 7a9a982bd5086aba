"""Errors raised by SimpleTVM; each message names the problem and the fix."""


class SimpleTVMError(Exception):
    """Base class of every error SimpleTVM raises on purpose."""


class FlowError(SimpleTVMError):
    """A step was called before the step it depends on (e.g. build() before from_model())."""


class ModelImportError(SimpleTVMError):
    """A model source could not be read or converted into Relax."""


class UnsupportedOperatorError(SimpleTVMError):
    """The model holds an operator, in a form TVM cannot lower to a kernel."""


class FrontendError(ModelImportError):
    """TVM's frontend failed on an operator it converts (``operator``), in a model it
    should read: the import step failed on a valid model, not bad input."""

    def __init__(self, message: str, operator: str) -> None:
        super().__init__(message)
        self.operator = operator

    def __reduce__(self):
        return type(self), (str(self), self.operator)


class IncompatibleModuleError(SimpleTVMError):
    """A saved module was built for another target or host than the current context."""


class RunNotFoundError(SimpleTVMError):
    """A run id names nothing in the run store."""


class WrongAnswerError(SimpleTVMError):
    """A build's outputs are further from the source framework's, on the same input, than
    the tolerance allows: it computes a different answer from the model."""


def error_gist(error: object) -> str:
    """The line of an error message that says what went wrong, at most 300 characters:
    TVM's messages span several screens of C++ frames, the last line naming an error
    being the one a user can act on."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    gist = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
    return gist[:300]
