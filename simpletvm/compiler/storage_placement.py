"""Where each intermediate tensor sits inside the memory it shares with other tensors.

Relax's static memory plan lets tensors of different sizes take turns in one storage,
each at the storage's start. The cores split most kernels' outputs at their middle, so
when a tensor is smaller or larger than the one before it in the same storage, the
boundary between the cores' halves moves, and one core writes cache lines the other core
wrote last. Taking those lines from the other core's cache is cheap while lines travel
fast between the cores and costly while they travel slowly, which on the 2-core hosts we
measure is often (BENCHMARKS.md, "Default schedules"). Centring every tensor in its
storage keeps the boundary at the storage's midpoint, so each core writes the lines it
wrote before. (On more cores only that middle boundary stays put; the others still move
with each tensor's size.)

The compiled kernels accept tensors at offset 0 only, so a centred tensor is handed to
them as a view starting at its first byte (Relax's ``ensure_zero_offset``, which on CPUs
moves the data pointer: no copy). That view costs a call into the runtime on every
inference; a tensor whose boundary would move by less than :data:`MIN_SHIFT_BYTES` is
left where the plan put it.
"""

from __future__ import annotations

import math

#: TVM's allocation alignment: a view whose start is a multiple of it shares the storage
#: rather than copying it (``ensure_zero_offset``), and keeps the kernels' aligned loads.
ALIGNMENT = 64

#: Below this shift of the cores' boundary (bytes), centring is not worth its view
#: (about 70 ns a call): the quickstart model, whose shifts are mostly smaller, ran no
#: faster centred in either host state, MobileNetV2 and ResNet-18 (shifts of 0.1-1.6 MB)
#: faster in the slow one (BENCHMARKS.md).
MIN_SHIFT_BYTES = 64 * 1024


def centred_offset(storage_bytes: int, tensor_bytes: int) -> int:
    """The offset (bytes, a multiple of :data:`ALIGNMENT`) that puts a tensor's midpoint
    at its storage's midpoint, or 0 where that moves the cores' boundary too little to
    pay for the view."""
    offset = max(0, storage_bytes - tensor_bytes) // 2 // ALIGNMENT * ALIGNMENT
    return offset if offset >= MIN_SHIFT_BYTES else 0


def centre_tensors_in_storage():
    """A Relax pass, to run after ``StaticPlanBlockMemory``: every tensor the plan
    places in a storage of known size is moved to :func:`centred_offset` and viewed from
    its first byte."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="CentreTensorsInStorage")
    def centre(mod, _context):
        from tvm import relax

        centring = _centring_mutator(mod)
        for global_var, func in list(mod.functions_items()):
            if isinstance(func, relax.Function):
                centring.builder_.update_func(global_var, centring.visit_expr(func))
        return centring.builder_.get()

    return centre


def cpu_build_pipeline():
    """TVM's default Relax build pipeline (``relax.get_pipeline("default")``, which
    ``relax.build`` uses for CPUs) with the tensors centred in their storages."""
    import tvm
    from tvm.relax import backend, transform

    return tvm.transform.Sequential(
        [
            backend.DispatchSampling(),
            backend.DispatchSortScan(),
            transform.LegalizeOps(),
            transform.RewriteDataflowReshape(),
            transform.ToNonDataflow(),
            transform.RemovePurityChecking(),
            transform.CallTIRRewrite(),
            transform.StaticPlanBlockMemory(),
            centre_tensors_in_storage(),
            transform.RewriteCUDAGraph(),
            transform.LowerAllocTensor(),
            transform.KillAfterLastUse(),
            transform.LowerRuntimeBuiltin(),
            transform.ComputePrimValue(),
            transform.VMShapeLower(),
            transform.AttachGlobalSymbol(),
        ],
        name="SimpleTVMCPUBuild",
    )


def _constant_bytes(shape, dtype) -> int | None:
    """Bytes of a tensor of a static ``relax.ShapeExpr`` shape, None for a symbolic one."""
    import tvm

    values = getattr(shape, "values", None)
    if values is None or not all(isinstance(v, tvm.tirx.IntImm) for v in values):
        return None
    return math.prod(int(v) for v in values) * tvm.runtime.DataType(dtype.value).bits // 8


def _centring_mutator(mod):
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    alloc_storage = tvm.ir.Op.get("relax.memory.alloc_storage")
    alloc_tensor = tvm.ir.Op.get("relax.memory.alloc_tensor")

    def call_of(value, op) -> bool:
        return isinstance(value, relax.Call) and value.op.same_as(op)

    @mutator
    class Centring(PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.storage_bytes = {}

        def visit_var_binding_(self, binding):
            value = binding.value
            if call_of(value, alloc_storage) and isinstance(value.args[0], relax.ShapeExpr):
                self.storage_bytes[binding.var] = int(value.args[0].values[0])
            elif call_of(value, alloc_tensor):
                storage, _offset, shape, dtype = value.args[:4]
                storage_bytes = self.storage_bytes.get(storage)
                tensor_bytes = _constant_bytes(shape, dtype)
                if storage_bytes is not None and tensor_bytes is not None:
                    offset = centred_offset(storage_bytes, tensor_bytes)
                    if offset:
                        placed = self.builder_.emit(
                            relax.Call(
                                value.op,
                                [
                                    self.visit_expr(storage),
                                    relax.prim_value(tvm.tirx.IntImm("int64", offset)),
                                    shape,
                                    dtype,
                                    *value.args[4:],
                                ],
                                value.attrs,
                                value.ty_args,
                            )
                        )
                        view = self.builder_.emit(relax.op.memory.ensure_zero_offset(placed))
                        self.set_var_remap(binding.var, view)
                        return
            super().visit_var_binding_(binding)

    return Centring(mod)
