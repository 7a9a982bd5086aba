"""How far a build's answers are from its source framework's on the same input, and
whether that is far enough to refuse the build.

The error of an output is relative: its largest difference over the reference's largest
magnitude, so one number reads alike for a softmax and a detector's pixel boxes. The
tolerance depends on the output's dtype (:data:`simpletvm.closeness.TOLERANCE`); a quantized output may be
one quantization step off, as two correct runtimes round a value differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from simpletvm.closeness import default_tolerance, relative_error
from simpletvm.errors import WrongAnswerError
from simpletvm.runtime.reference import Expected


@dataclass(frozen=True)
class OutputError:
    """One output's relative error and the tolerance it is held to."""

    name: str
    error: float
    tolerance: float
    dtype: str


@dataclass(frozen=True)
class Answers:
    """A build's outputs against the reference's: ``reference`` names the framework (or
    says why there was none), ``errors`` has one entry per output (none without a
    reference)."""

    reference: str
    errors: tuple[OutputError, ...] = ()

    @property
    def worst(self) -> OutputError | None:
        """The output furthest from its reference, relative to its tolerance."""
        return max(self.errors, key=lambda e: e.error / e.tolerance, default=None)

    def stats(self) -> dict[str, Any]:
        """``max_rel_error`` (worst over outputs), ``reference`` and the ``tolerance`` of
        the output with that error: what the evaluation statistics carry."""
        largest = max(self.errors, key=lambda e: e.error, default=None)
        return {
            "max_rel_error": largest.error if largest else None,
            "reference": self.reference,
            "tolerance": largest.tolerance if largest else None,
        }

    def refusal(self) -> WrongAnswerError | None:
        """The error refusing the build when an output is further off than its tolerance,
        naming it, its error, the tolerance and what to do; None otherwise."""
        worst = self.worst
        if worst is None or worst.error <= worst.tolerance:
            return None
        return WrongAnswerError(
            f"the built module computes a different answer from the model: its output "
            f"{worst.name!r} is {worst.error:.2e} away from {self.reference}'s on the same "
            f"input (largest difference over the reference's largest magnitude), over "
            f"the {worst.dtype} tolerance {worst.tolerance:.2e}. Build it untuned "
            "(build(records=None), --records none) to tell a tuning record's kernel from "
            "the compiler, and report it with the model; to accept the build, raise the "
            "tolerance: evaluate(tolerance=...), --tolerance on the command line"
        )


def compare(
    names: list[str], outputs: list[np.ndarray], source: Expected, tolerance: float | None = None
) -> Answers:
    """Each output (named ``names``) against the source's, held to ``tolerance`` when
    given, else to its dtype's (:func:`default_tolerance`)."""
    reference, expected = source.reference, source.outputs
    if expected is None:
        return Answers(reference)
    if len(outputs) != len(expected) or any(
        np.size(ours) != np.size(theirs) for ours, theirs in zip(outputs, expected)
    ):
        shapes = [np.shape(a) for a in outputs], [np.shape(a) for a in expected]
        return Answers(
            f"none: the outputs of {reference}, shaped {shapes[1]}, do not pair with the "
            f"module's, {shapes[0]}"
        )
    errors = []
    for index, (name, ours, theirs) in enumerate(zip(names, outputs, expected)):
        theirs = np.asarray(theirs)
        error, scale = relative_error(np.asarray(ours).reshape(theirs.shape), theirs)
        step = source.steps[index] if index < len(source.steps) else None
        dtype = str(theirs.dtype)
        allowed = tolerance if tolerance is not None else default_tolerance(dtype, scale, step)
        errors.append(OutputError(name, error, allowed, dtype))
    return Answers(reference, tuple(errors))


def check_tolerance(tolerance: float | None) -> None:
    """Refuse a tolerance that is not a relative error (positive; ``math.inf`` accepts
    any answer)."""
    if tolerance is not None and not tolerance > 0:
        raise ValueError(
            f"tolerance={tolerance!r} is not a relative error: give a positive number, e.g. "
            "1e-3 (a thousandth of the reference's largest magnitude), or leave it unset "
            "for each output's dtype's default"
        )
