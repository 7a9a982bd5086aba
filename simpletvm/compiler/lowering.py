"""Relax module -> fused, tunable module, and its tasks.

The same lowering feeds task extraction and the final build
(:mod:`simpletvm.compiler.build`), so the workloads that tuning records are keyed by are
exactly the ones the build looks up.
"""

from __future__ import annotations

from typing import Any

from simpletvm.errors import UnsupportedOperatorError
from simpletvm.relax_ir import static_shape
from simpletvm.targets import ResolvedTarget


def fuse(
    mod,
    target: ResolvedTarget,
    *,
    winograd: bool = True,
    layout: str | None = "NHWC",
    separate_residual_pads: bool = True,
    window_pads: bool = True,
    winograd_forms=None,
):
    """Legalize and fuse a Relax module into the PrimFuncs that tuning works on.

    On CPUs, ``layout="NHWC"`` first converts NCHW 2-D convolutions (ONNX imports) to NHWC
    and cancels the transposes that leaves (:func:`simpletvm.compiler.layout.to_nhwc`): tuned, they
    run faster than NCHW (BENCHMARKS.md). A module without NCHW convolutions (TFLite imports) is
    unchanged; ``layout=None`` keeps the layout as imported.

    On CPUs the weights (constants of the module) are marked layout-free, so a schedule
    may store them in the order its loops read them (MetaSchedule's RewriteLayout);
    :func:`compile_fused` then repacks them once, at build time. With ``winograd``, CPU
    targets get their NHWC 3x3 stride-1 convolutions as Winograd F(4,3), weights
    transformed here, once (:mod:`simpletvm.compiler.winograd`): tuned, they run faster than
    tuned direct convolutions (BENCHMARKS.md). ``winograd_forms`` sets the form
    of given layers (``{ConvSignature: tile size or None}``, see
    :mod:`simpletvm.compiler.conv_forms`); the others get their default form.

    On CPUs, with ``window_pads``, the pad of a depthwise convolution is read in place
    rather than copied (:mod:`simpletvm.compiler.window_pads`).

    With ``separate_residual_pads``, a pad whose result is added to a convolution's output
    (a residual branch padded to more channels, as in BlazeFace's blocks) is kept out of
    the convolution's fused operator (:func:`separate_residual_pads`): MetaSchedule cannot
    schedule that operator with the pad inside.
    """
    import tvm
    from tvm import relax

    from simpletvm.compiler.transposed_conv import direct_transposed_convs

    mod, _ = direct_transposed_convs(mod)
    mod = to_layout(mod, target, layout)
    if winograd and target.device_type == "cpu":
        from simpletvm.compiler.winograd import apply_winograd

        mod, _ = apply_winograd(mod, forms=winograd_forms)
    cpu_only = []
    if target.device_type == "cpu":
        from simpletvm.compiler.window_pads import inline_window_pads_pass

        cpu_only = [
            *([inline_window_pads_pass()] if window_pads else []),
            relax.transform.AttachAttrLayoutFreeBuffers(),
        ]
    with target.tvm_target():
        fused = tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.transform.LegalizeOps(),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
                *([_separate_residual_pads_pass()] if separate_residual_pads else []),
                relax.transform.FuseOps(),
                relax.transform.FuseTIR(),
                *cpu_only,
            ]
        )(mod)
    refuse_unlowered(fused)
    return fused


def refuse_unlowered(mod) -> None:
    """Raise :class:`UnsupportedOperatorError` naming each operator that legalization
    left as it was (TVM has no kernel for it in that form: a layout, a dtype), with its
    attributes and argument shapes, rather than let the build fail on it with a page of
    IR."""
    import tvm
    from tvm import relax

    left = []

    def visit(expr):
        if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)):
            return
        if expr.op.get_attr("FLegalize") is None:
            return  # the VM's own operators (call_tir, builtins) need no kernel
        shapes = [static_shape(arg) for arg in expr.args]
        layout = getattr(expr.attrs, "data_layout", None) if expr.attrs is not None else None
        left.append(
            f"{expr.op.name.removeprefix('relax.')} on inputs "
            f"{', '.join(str(s) for s in shapes if s is not None)}"
            + (f" (data layout {layout})" if layout else "")
        )

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    if left:
        raise UnsupportedOperatorError(
            "TVM cannot lower these operators as the model has them: "
            + "; ".join(dict.fromkeys(left))
            + ". Export the model with these layers in another form (channels-first, "
            "another dtype, an equivalent layer), or leave them out"
        )


def to_layout(mod, target: ResolvedTarget, layout: str | None = "NHWC"):
    """The module in the layout :func:`fuse` converts it to before rewriting layers."""
    if layout not in (None, "NHWC"):
        raise ValueError(f"layout must be 'NHWC' or None, not {layout!r}")
    if layout == "NHWC" and target.device_type == "cpu":
        from simpletvm.compiler.layout import to_nhwc

        mod, _ = to_nhwc(mod)
    return mod


# relax OpPatternKind, as AnnotateTIROpPattern sets a PrimFunc's "op_pattern" (a pad of
# the channels only reads each element at its own index: it is annotated elementwise)
BROADCAST = 1  # elementwise (0) and broadcast (1) ops are at most this
INJECTIVE = 2
OUT_EWISE_FUSABLE = 4  # convolutions, matmuls: elementwise consumers fuse into them
OPAQUE = 8  # fused with nothing


def separate_residual_pads(mod):
    """Keep residual pads out of the convolutions' fused operators.

    A block whose shortcut is padded to more channels, ``relu(conv(h) + pad(x))``
    (BlazeFace's), fuses into one operator holding the convolution, its epilogue and the
    pad. MetaSchedule (TVM 0.27) cannot schedule it: generating its design space fails in
    ``reverse-compute-at`` ("The primitive requires all the producer(s) of the given block
    to be present under the target loop"), so the operator cannot be tuned and keeps
    TVM's naive code. Here such a pad (a pad call whose result an elementwise or broadcast
    op combines with a value computed from a convolution-like operator) calls a copy of
    its PrimFunc marked opaque, so FuseOps leaves it a kernel of its own: the convolution's
    operator then reads the padded tensor as an input, the residual-add pattern that
    MetaSchedule schedules, and the pad is one cheap copy. Outputs are unchanged.

    Works on a legalized module with op patterns annotated (between AnnotateTIROpPattern
    and FuseOps). Returns ``(module, number of pads separated)``.
    """
    from tvm import relax

    calls = {}  # the call_tir bindings to separate, by identity, -> their pad PrimFunc
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            calls.update(_residual_pad_calls(mod, func))
    if not calls:
        return mod, 0
    mutator = _make_call_redirector()(mod)
    copies = {}  # pad PrimFunc name -> its opaque copy, added by the builder (typed)
    for name, gvar in {gv.name_hint: gv for gv in calls.values()}.items():
        copies[name] = mutator.builder_.add_func(
            mod[gvar].with_attr("op_pattern", OPAQUE), f"{name}_residual"
        )
    mutator.targets = {call: copies[gvar.name_hint] for call, gvar in calls.items()}
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gvar, mutator.visit_expr(func))
    return mutator.builder_.get(), len(calls)


def _residual_pad_calls(mod, func) -> dict:
    """The pad calls of ``func`` that would fuse into a convolution's operator through an
    elementwise op: ``{call: pad PrimFunc's GlobalVar}``."""
    import tvm
    from tvm import relax

    bound: dict = {}  # var -> (callee GlobalVar, its op pattern, argument vars)
    users: dict = {}  # var -> [var of each call_tir binding that reads it]

    def visit(binding):
        value = binding.value
        if not (
            isinstance(binding, relax.VarBinding)
            and isinstance(value, relax.Call)
            and isinstance(value.op, tvm.ir.Op)
            and value.op.name == "relax.call_tir"
        ):
            return
        callee = value.args[0]
        prim = mod[callee] if isinstance(callee, tvm.ir.GlobalVar) else None
        if not isinstance(prim, tvm.tirx.PrimFunc):
            return
        pattern = int(prim.attrs.get("op_pattern", OPAQUE)) if prim.attrs else OPAQUE
        args = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else [value.args[1]]
        args = [a for a in args if isinstance(a, relax.Var)]
        bound[binding.var] = (callee, pattern, args, value)
        for arg in args:
            users.setdefault(arg, []).append(binding.var)

    body = func.body
    for block in body.blocks if isinstance(body, relax.SeqExpr) else []:
        for binding in block.bindings:
            visit(binding)

    def from_anchor(var, depth=0) -> bool:
        """Computed by a convolution-like operator, maybe through elementwise ops."""
        if var not in bound or depth > 8:
            return False
        _, pattern, args, _ = bound[var]
        if pattern == OUT_EWISE_FUSABLE:
            return True
        return pattern <= BROADCAST and any(from_anchor(a, depth + 1) for a in args)

    found = {}
    for var, (callee, pattern, _, call) in bound.items():
        if pattern > INJECTIVE or not callee.name_hint.startswith("pad"):
            continue
        for user in users.get(var, []):
            _, user_pattern, user_args, _ = bound[user]
            if user_pattern <= BROADCAST and any(
                a is not var and from_anchor(a) for a in user_args
            ):
                found[call] = callee
                break
    return found


def _separate_residual_pads_pass():
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="SeparateResidualPads")
    def separate(mod, _context):
        return separate_residual_pads(mod)[0]

    return separate


def _make_call_redirector():
    """A mutator that points given call_tir calls at other PrimFuncs."""
    from tvm import relax

    @relax.expr_functor.mutator
    class CallRedirector(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.targets = {}  # call -> GlobalVar of the PrimFunc it calls instead

        def visit_call_(self, call):
            for original, gvar in self.targets.items():
                if call.same_as(original):
                    return relax.Call(call.op, [gvar, *call.args[1:]], call.attrs, call.ty_args)
            return self.visit_expr_post_order(call)

    return CallRedirector


def extract_tasks(fused_mod, target: ResolvedTarget) -> list[Any]:
    """MetaSchedule's tunable tasks of a fused module, or of several (each workload
    once, as the first module that has it weighs it): the first module's in its order,
    heaviest (by weight) first, then the others' new ones."""
    from tvm.s_tir import meta_schedule as ms

    modules = fused_mod if isinstance(fused_mod, (list, tuple)) else [fused_mod]
    tasks, seen = [], set()
    for module in modules:
        for task in ms.relax_integration.extract_tasks(module, target.tvm_target()):
            key = workload_key(task.dispatched[0])
            if key not in seen and not is_scheduled(task.mod):
                seen.add(key)
                tasks.append(task)
    return tasks


def is_scheduled(func) -> bool:
    """Whether ``func`` (a PrimFunc, or a task's IRModule) already has its schedule (a
    record's, or a default one): such a kernel is neither tuned nor scheduled again."""
    return func.attrs is not None and bool(func.attrs.get("tirx.is_scheduled", False))


def workload_key(mod) -> str:
    """A task's key in the records: its structural hash, as MetaSchedule's ``Workload``
    computes it, so records found by key are the ones the build looks up."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod))
