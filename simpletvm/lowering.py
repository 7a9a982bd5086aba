"""Relax module -> fused, tunable module -> executable, with or without tuning records.

The same lowering feeds task extraction and the final build, so the workloads that
tuning records are keyed by are exactly the ones the build looks up.
"""

from __future__ import annotations

from typing import Any

from .targets import ResolvedTarget


def fuse(mod, target: ResolvedTarget, *, winograd: bool = True, layout: str | None = "NHWC"):
    """Legalize and fuse a Relax module into the PrimFuncs that tuning works on.

    On CPUs, ``layout="NHWC"`` first converts NCHW 2-D convolutions (ONNX imports) to NHWC
    and cancels the transposes that leaves (:func:`simpletvm.layout.to_nhwc`): tuned, they
    ran 1.1-2.5x faster than NCHW. A module without NCHW convolutions (TFLite imports) is
    unchanged; ``layout=None`` keeps the layout as imported.

    On CPUs the weights (constants of the module) are marked layout-free, so a schedule
    may store them in the order its loops read them (MetaSchedule's RewriteLayout);
    :func:`compile_fused` then repacks them once, at build time. With ``winograd``, CPU
    targets get their NHWC 3x3 stride-1 convolutions as Winograd F(4,3), weights
    transformed here, once (:mod:`simpletvm.winograd`): where measured, tuned, they ran
    about twice as fast as tuned direct convolutions.
    """
    import tvm
    from tvm import relax

    if layout not in (None, "NHWC"):
        raise ValueError(f"layout must be 'NHWC' or None, not {layout!r}")
    if layout == "NHWC" and target.device_type == "cpu":
        from .layout import to_nhwc

        mod, _ = to_nhwc(mod)
    if winograd and target.device_type == "cpu":
        from .winograd import apply_winograd

        mod, _ = apply_winograd(mod)
    weight_prepack = [relax.transform.AttachAttrLayoutFreeBuffers()] if target.device_type == "cpu" else []
    with target.tvm_target():
        return tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.transform.LegalizeOps(),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
                relax.transform.FuseOps(),
                relax.transform.FuseTIR(),
                *weight_prepack,
            ]
        )(mod)


def extract_tasks(fused_mod, target: ResolvedTarget) -> list[Any]:
    """MetaSchedule's tunable tasks of a fused module, heaviest (by weight) first."""
    from tvm.s_tir import meta_schedule as ms

    tasks = ms.relax_integration.extract_tasks(fused_mod, target.tvm_target())
    return [t for t in tasks if not t.mod.attrs.get("tirx.is_scheduled", False)]


def compile_fused(fused_mod, target: ResolvedTarget, database=None):
    """Build an executable, replacing each tuned PrimFunc with its best record.

    GPU targets need every kernel scheduled, so untuned ones get DLight's defaults.
    """
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight

    tvm_target = target.tvm_target()
    mod = fused_mod
    if database is not None:
        with tvm_target, database:
            mod = relax.transform.MetaScheduleApplyDatabase()(mod)
            # weights a tuned schedule reads in its own layout: repacked here, once
            mod = relax.transform.SplitLayoutRewritePreproc()(mod)
            mod = relax.transform.FoldConstant()(mod)
    if target.device_type == "cuda":
        with tvm_target:
            mod = dlight.ApplyDefaultSchedule(
                dlight.gpu.Matmul(), dlight.gpu.GEMV(), dlight.gpu.Reduction(),
                dlight.gpu.GeneralReduction(), dlight.gpu.Fallback(),
            )(mod)
    return tvm.compile(mod, target=tvm_target)
