"""How close two answers are: the relative error of one array to a reference, and the
tolerance each dtype is held to. One measure for a built model against its framework
(:mod:`simpletvm.runtime.accuracy`) and a scheduled kernel against its naive schedule
(:mod:`simpletvm.compiler.schedule_check`)."""

from __future__ import annotations

import numpy as np

# Relative tolerances by output dtype: correct float32 builds come orders of magnitude
# closer (BENCHMARKS.md), a wrong kernel as far off as the output itself. float16 keeps 11
# bits, bfloat16 8.
TOLERANCE = {"float64": 1e-3, "float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}
TINY = np.finfo(np.float32).tiny  # the scale of an all-zero reference


def relative_error(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, float]:
    """``max|ours - theirs| / max(max|theirs|, tiny)`` and that scale. Values equal on
    both sides (infinities, NaN against NaN) differ by nothing; a NaN or infinity on one
    side only is an infinite error."""
    ours, theirs = ours.astype(np.float64), theirs.astype(np.float64)
    same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
    with np.errstate(invalid="ignore"):
        difference = np.where(same, 0.0, np.abs(ours - theirs))
    difference = np.nan_to_num(difference, nan=np.inf)
    finite = np.abs(theirs[np.isfinite(theirs)])
    scale = max(float(finite.max()) if finite.size else 0.0, float(TINY))
    return (float(difference.max()) / scale if difference.size else 0.0), scale


def default_tolerance(dtype: str, scale: float, step: float | None = None) -> float:
    """An output's tolerance: its float dtype's (:data:`TOLERANCE`), or one quantization
    ``step`` (an integer output's is 1) relative to the reference's largest magnitude
    ``scale``, whichever is larger."""
    if not dtype.startswith(("float", "bfloat")):
        step = max(step or 0.0, 1.0)
    floor = TOLERANCE.get(dtype, 0.0 if step else TOLERANCE["float32"])
    return max(floor, step / scale) if step else floor
