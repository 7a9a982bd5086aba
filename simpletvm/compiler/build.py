"""Fused module -> executable: tuning records and default schedules applied, each
schedule checked against TVM's naive one, the weights repacked once."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

from simpletvm.compiler.default_schedules import apply_default_schedules
from simpletvm.compiler.lowering import is_scheduled
from simpletvm.compiler.machine_verdicts import MachineVerdicts, StoreThenMachine
from simpletvm.compiler.schedule_check import VerdictBook, check_scheduled, warn_wrong
from simpletvm.targets import ResolvedTarget


def schedule(fused_mod, target: ResolvedTarget, database, *, defaults=True, avoid=None):
    """The fused module with each kernel's best record in ``database`` (None: no
    records) and, on CPUs, every other kernel's default schedule (``defaults``).
    ``avoid``: ``{kernel name: "record" | "default"}``, schedules found wrong: such a
    kernel gets its default instead of its record, or keeps TVM's naive schedule instead
    of its default. Returns ``(module, {kernel name: "record" | "default"})``, where
    each scheduled kernel's schedule came from."""
    import tvm
    from tvm import relax

    avoid = avoid or {}
    with target.tvm_target(), database if database is not None else contextlib.nullcontext():
        mod = (
            fused_mod
            if database is None
            else relax.transform.MetaScheduleApplyDatabase()(fused_mod)
        )
        mod = _restore(mod, fused_mod, [n for n, what in avoid.items() if what == "record"])
        origin = {
            gvar.name_hint: "record"
            for gvar, func in mod.functions_items()
            if isinstance(func, tvm.tirx.PrimFunc)
            and is_scheduled(func)
            and not is_scheduled(fused_mod[gvar.name_hint])
        }
        if defaults:
            naive = [n for n, what in avoid.items() if what == "default"]
            kept = {n: mod[n] for n in naive if not is_scheduled(mod[n])}
            mod, _ = apply_default_schedules(_without(mod, kept), target)
            mod = _with(mod, kept)
            for gvar, func in mod.functions_items():
                name = gvar.name_hint
                if name not in origin and isinstance(func, tvm.tirx.PrimFunc):
                    if is_scheduled(func) and not is_scheduled(fused_mod[name]):
                        origin[name] = "default"
    return mod, origin


def finish(mod, target: ResolvedTarget):
    """A scheduled module ready to build: the weights its schedules read in their own
    layout repacked once, here, rather than on every call."""
    from tvm import relax

    with target.tvm_target():
        mod = relax.transform.SplitLayoutRewritePreproc()(mod)
        mod = relax.transform.FoldConstant()(mod)
        # the repacked weights come out of folding as tuples of constants, which the
        # VM would build and take apart again on every call (4 calls a kernel)
        mod = relax.transform.CanonicalizeBindings()(mod)
        return relax.transform.DeadCodeElimination()(mod)


def apply_records(fused_mod, target: ResolvedTarget, database, *, defaults: bool = True):
    """:func:`schedule`, then :func:`finish`: the module a build compiles (unchecked)."""
    return finish(schedule(fused_mod, target, database, defaults=defaults)[0], target)


def compile_fused(
    fused_mod,
    target: ResolvedTarget,
    database=None,
    *,
    bytecode: bool = False,
    default_schedules: bool = True,
    check: bool = True,
    verdicts: VerdictBook | None = None,
):
    """Build an executable, replacing each tuned PrimFunc with its best record.

    GPU targets need every kernel scheduled, so untuned ones get DLight's defaults.
    CPU executables run the entry function as compiled code rather than VM bytecode:
    a model of many microsecond kernels (the quickstart's 55) spends a measurable share
    of its time interpreting the calls between them (BENCHMARKS.md). ``bytecode=True``
    keeps the bytecode, whose calls a VM instrument sees one by one (profiling kernels
    in place). On CPUs a kernel that no record covers gets its default schedule
    (parallel, vectorized; :mod:`simpletvm.compiler.default_schedules`), not TVM's naive
    one; ``default_schedules=False`` keeps TVM's (for comparisons). On CPUs each
    intermediate tensor sits at the middle of the memory it shares with others, so each
    core keeps writing the cache lines it wrote before
    (:mod:`simpletvm.compiler.storage_placement`).

    With ``check``, on a CPU that runs here, every record and default applied is checked
    against TVM's naive schedule of its kernel while the module builds
    (:mod:`simpletvm.compiler.schedule_check`), verdicts kept in ``verdicts`` (by
    default the database's own) and in this machine's book
    (:mod:`simpletvm.compiler.machine_verdicts`), so a kernel is checked once per
    machine: a wrong record is refused in the database and its
    kernel gets its default schedule; a wrong default leaves TVM's naive schedule; the
    module is then built again.
    """
    from tvm import relax
    from tvm.s_tir import dlight

    defaults = default_schedules and target.device_type == "cpu"
    if target.device_type == "cuda":
        mod = fused_mod if database is None else apply_records(fused_mod, target, database)
        with target.tvm_target():
            mod = dlight.ApplyDefaultSchedule(
                dlight.gpu.Matmul(),
                dlight.gpu.GEMV(),
                dlight.gpu.Reduction(),
                dlight.gpu.GeneralReduction(),
                dlight.gpu.Fallback(),
            )(mod)
        return relax.build(mod, target.tvm_target(), exec_mode="bytecode")

    def build(scheduled):
        from simpletvm.compiler.storage_placement import cpu_build_pipeline

        return relax.build(
            finish(scheduled, target),
            target.tvm_target(),
            exec_mode="bytecode" if bytecode else "compiled",
            relax_pipeline=cpu_build_pipeline(),
        )

    scheduled, origin = schedule(fused_mod, target, database, defaults=defaults)
    if not (check and target.device_type == "cpu" and target.runs_here and origin):
        return build(scheduled)
    if verdicts is None and hasattr(database, "verdicts"):
        verdicts = database.verdicts()
    verdicts = StoreThenMachine(verdicts, MachineVerdicts(str(target.tvm_target())))
    with ThreadPoolExecutor(1, thread_name_prefix="schedule-check") as pool:
        checking = pool.submit(check_scheduled, fused_mod, scheduled, origin, target, verdicts)
        executable = build(scheduled)  # while the schedules are checked
        wrong = checking.result()
    avoid: dict[str, str] = {}
    while wrong:
        for name, verdict in wrong.items():
            warn_wrong(name, origin[name], verdict)
            if origin[name] == "record" and hasattr(database, "refuse_record"):
                database.refuse_record(_task(fused_mod[name]), verdict.describe())
            avoid[name] = origin[name]
        scheduled, origin = schedule(fused_mod, target, database, defaults=defaults, avoid=avoid)
        fresh = {n: what for n, what in origin.items() if n in wrong}
        wrong = check_scheduled(fused_mod, scheduled, fresh, target, verdicts)
        executable = None
    return executable if executable is not None else build(scheduled)


def _task(func):
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return _normalize_mod(func)


def _restore(mod, original, names):
    """``mod`` with the kernels ``names`` as they are in ``original``."""
    return _with(mod, {name: original[name] for name in names})


def _without(mod, kernels: dict):
    """``mod`` with ``kernels`` marked scheduled, so default schedules pass them by."""
    return _with(mod, {n: f.with_attr("tirx.is_scheduled", True) for n, f in kernels.items()})


def _with(mod, kernels: dict):
    import tvm

    if not kernels:
        return mod
    functions = {gvar: func for gvar, func in mod.functions_items()}
    for gvar in list(functions):
        if gvar.name_hint in kernels:
            functions[gvar] = kernels[gvar.name_hint]
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
