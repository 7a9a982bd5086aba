"""Every schedule a build applies, checked once against TVM's naive schedule of the same
kernel.

A schedule (a tuning record's, or a default) is a rewrite of a kernel's loops that must
not change what it computes; a fault in a schedule primitive or postprocessor can make it
do so silently (docs/decisions/001-transposed-convolutions.md). Here each scheduled
kernel and its unscheduled original are compiled side by side, run on the same seeded
random arguments, and every argument compared afterwards: a kernel whose worst relative
error passes its dtype's tolerance is wrong. A verdict is kept in a
:class:`VerdictBook` (the records database), keyed by the kernel's workload, the target
and the scheduled kernel itself, so each pair is checked once. A build drops a wrong
record for the kernel's default schedule and a wrong default for TVM's naive schedule,
with a warning naming the kernel (:func:`checked`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simpletvm.closeness import default_tolerance, relative_error
from simpletvm.errors import error_gist

SEED = 0
CHECKED_OPT_LEVEL = 0


@dataclass(frozen=True)
class Verdict:
    """A scheduled kernel against its naive schedule: ``error`` is the worst relative
    error over its arguments (None: it did not run, ``detail`` says why)."""

    ok: bool
    error: float | None = None
    detail: str = ""

    def describe(self) -> str:
        if self.error is None:
            return self.detail
        verb = "matches" if self.ok else "computes a different answer from"
        return f"{verb} TVM's naive schedule (relative error {self.error:.3g})"


class VerdictBook(Protocol):
    """Where one target's verdicts are kept, by the unscheduled kernel's key and the
    scheduled one's (:meth:`simpletvm.tuning.records.RecordStore.verdicts`)."""

    def schedule_verdict(self, workload: str, schedule: str) -> Verdict | None: ...

    def note_schedule_verdict(self, workload: str, schedule: str, verdict: Verdict) -> None: ...


def kernel_key(func) -> str:
    """The key of a PrimFunc: its structural hash (a task's workload key, when ``func``
    is unscheduled; the schedule's identity, when scheduled)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(func.without_attr("global_symbol")))


def check_kernels(pairs: dict[str, tuple], target) -> dict[str, Verdict]:
    """Verdicts for ``{name: (naive PrimFunc, scheduled PrimFunc)}`` on a TVM ``target``
    that runs here. Both forms of every kernel are compiled in one module; a kernel
    that fails to compile is compiled alone to name it."""
    if not pairs:
        return {}
    try:
        library = _compile(pairs, target)
    except Exception:  # noqa: BLE001 - find the kernel(s) that do not compile
        verdicts = {}
        for name, pair in pairs.items():
            try:
                verdicts[name] = _compare(_compile({name: pair}, target), name, pair[0])
            except Exception as error:  # noqa: BLE001 - this kernel's verdict
                verdicts[name] = Verdict(False, None, f"does not compile: {error_gist(error)}")
        return verdicts
    return {name: _compare(library, name, pair[0]) for name, pair in pairs.items()}


def _compile(pairs: dict[str, tuple], target) -> dict:
    """``{"naive": library, "checked": library}``. The scheduled kernels run once here,
    so LLVM spends no time optimizing them (their unrolled loops are most of the
    compile time); the naive ones, optimized, run faster than they compile."""
    import tvm

    libraries = {}
    for index, prefix in enumerate(("naive", "checked")):
        functions = {
            f"{prefix}_{name}": pair[index].with_attr("global_symbol", f"{prefix}_{name}")
            for name, pair in pairs.items()
        }
        module = tvm.IRModule({tvm.ir.GlobalVar(n): f for n, f in functions.items()})
        spec = dict(target.export())
        if prefix == "checked":
            spec["opt-level"] = CHECKED_OPT_LEVEL
        libraries[prefix] = tvm.compile(module, target=tvm.target.Target(spec))
    return libraries


def _compare(library, name: str, naive) -> Verdict:
    import tvm

    arrays = random_arguments(naive)
    device = tvm.cpu()
    try:
        results = []
        for prefix in ("naive", "checked"):
            tensors = [tvm.runtime.tensor(a, device) for a in arrays]
            library[prefix][f"{prefix}_{name}"](*tensors)
            results.append([t.numpy() for t in tensors])
    except Exception as error:  # noqa: BLE001 - a kernel that fails to run is no verdict's
        return Verdict(False, None, f"does not run: {error_gist(error)}")
    worst, ok = 0.0, True
    for expected, got in zip(*results):
        error, scale = relative_error(got, expected)
        worst = max(worst, error)
        ok = ok and error <= default_tolerance(str(expected.dtype), scale)
    return Verdict(ok, worst)


def random_arguments(func) -> list[np.ndarray]:
    """Seeded arguments for every parameter of ``func``: standard normal floats,
    integers over their range for 8-bit data, zeros for wider integers and booleans
    (an index of zero is inside every axis)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(SEED)
    arrays = []
    for info in ArgInfo.from_prim_func(func):
        _, dtype, shape = info.as_json()
        shape, dtype = [int(d) for d in shape], str(dtype)
        if dtype.startswith(("float", "bfloat")):
            arrays.append(rng.standard_normal(shape).astype("float32").astype(dtype))
        elif dtype in ("int8", "uint8"):
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype))
        else:
            arrays.append(np.zeros(shape, dtype))
    return arrays


def check_scheduled(original, scheduled, which, target, book: VerdictBook | None) -> dict:
    """The kernels named in ``which`` (their schedules in ``scheduled``) against their
    unscheduled versions in ``original``: ``{name: verdict}`` of the wrong ones.
    Verdicts come from ``book`` (this target's) when it has them, else from running both
    forms, and then go into ``book``."""
    pending, verdicts = {}, {}
    for name in which:
        before, func = original[name], scheduled[name]
        keys = (kernel_key(before), kernel_key(func))
        known = book.schedule_verdict(*keys) if book is not None else None
        if known is not None:
            verdicts[name] = known
        else:
            pending[name] = (before, func, keys)
    fresh = check_kernels(
        {name: (before, func) for name, (before, func, _) in pending.items()},
        target.tvm_target(),
    )
    for name, verdict in fresh.items():
        verdicts[name] = verdict
        if book is not None:
            book.note_schedule_verdict(*pending[name][2], verdict)
    return {name: verdict for name, verdict in verdicts.items() if not verdict.ok}


def warn_wrong(name: str, what: str, verdict: Verdict) -> None:
    """Say that ``what`` (``"record"`` or ``"default"``) schedule of kernel ``name`` is
    wrong and what the kernel is built with instead."""
    instead = "its default schedule" if what == "record" else "TVM's naive schedule"
    warnings.warn(
        f"the {what} schedule of {name} {verdict.describe()}: {name} is built with {instead}",
        stacklevel=3,
    )
