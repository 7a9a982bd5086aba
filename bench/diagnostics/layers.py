"""Per-layer latency of tuned convolutions: NCHW, NHWC, NHWC Winograd and NHWC im2col.

Layers at batch 1, float32, each a one-op Relax module (conv2d only, no epilogue), by
default a 1x1 96->576 conv at 14x14, a 3x3 depthwise 144-channel conv at 56x56, and 3x3
128->128 at 28x28 and 64->64 at 56x56 (stride 1, 'same' padding); ResNet-18's other
3x3 layers, stride 1 and stride 2, on request. Every layer is built
in NCHW (OIHW kernel), NHWC (HWIO kernel, HWOI for the depthwise one, as the TFLite
frontend emits), for the 3x3 stride-1 ones NHWC Winograd (simpletvm.compiler.winograd), and for
the dense ones (not depthwise) NHWC im2col: the patches copied into a matrix by an
operator of their own, then one matrix product with the weights (two tasks, timed
together as the layer).
Each variant is tuned alone with SimpleTVM's TuningJob (local runner) and the same trial
budget and search options, then built with its records; all built modules are timed at
the end, in alternating rounds so background load hits them alike, with TVM's time
evaluator (warm: the layer's weights stay in cache between runs). Reported per variant: median latency, effective GFLOP/s (the direct
convolution's FLOPs for every variant, Winograd included) and speedup over the NHWC
direct variant of the same layer (NHWC ms / variant ms: above 1 is faster). Every
variant's output is checked against the NHWC direct one.

    python bench/diagnostics/layers.py [--trials 64] [--candidates-per-iteration N] [--population N]
                           [--layers a,b,c,d] [--variants nhwc,im2col] [--rounds 3]
                           [--out results.json]

Search options not given are TuningOptions' defaults, the same for every variant.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Layer:
    key: str
    name: str
    size: int  # H = W
    in_channels: int
    out_channels: int
    kernel: int
    groups: int = 1
    stride: int = 1

    @property
    def padding(self) -> int:
        return self.kernel // 2

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.padding - self.kernel) // self.stride + 1

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the direct convolution."""
        per_output = 2 * (self.in_channels // self.groups) * self.kernel * self.kernel
        return per_output * self.out_size * self.out_size * self.out_channels


LAYERS = [
    Layer("a", "1x1 96->576 14x14", 14, 96, 576, 1),
    Layer("b", "dw3x3 144 56x56", 56, 144, 144, 3, groups=144),
    Layer("c", "3x3 128->128 28x28", 28, 128, 128, 3),
    Layer("d", "3x3 64->64 56x56", 56, 64, 64, 3),
    Layer("e", "3x3 256->256 14x14", 14, 256, 256, 3),
    Layer("f", "3x3 512->512 7x7", 7, 512, 512, 3),
    Layer("g", "3x3 s2 64->128 56x56", 56, 64, 128, 3, stride=2),
    Layer("h", "3x3 s2 128->256 28x28", 28, 128, 256, 3, stride=2),
    Layer("i", "3x3 s2 256->512 14x14", 14, 256, 512, 3, stride=2),
]
WINOGRAD_TILES = {"NHWC winograd F(4,3)": 4, "NHWC winograd F(2,3)": 2}
IM2COL = "NHWC im2col"


def variants_of(layer: Layer, wanted: str | None = None) -> list[str]:
    """The layouts and forms of ``layer`` (those in ``wanted``, comma-separated keys
    nchw, nhwc, f4, f2, im2col, when given); NHWC direct always, as the reference."""
    variants = {"nchw": "NCHW", "nhwc": "NHWC"}
    if layer.kernel == 3 and layer.groups == 1 and layer.stride == 1:
        variants |= {"f4": "NHWC winograd F(4,3)", "f2": "NHWC winograd F(2,3)"}
    if layer.groups == 1:
        variants["im2col"] = IM2COL
    keys = wanted.split(",") if wanted else list(variants)
    return [name for key, name in variants.items() if key in keys or key == "nhwc"]


def weight_hwio(layer: Layer, seed: int = 0) -> np.ndarray:
    """(kh, kw, in channels per group, out channels), seeded."""
    rng = np.random.default_rng(seed)
    fan_in = layer.kernel * layer.kernel * layer.in_channels // layer.groups
    shape = (layer.kernel, layer.kernel, layer.in_channels // layer.groups, layer.out_channels)
    return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype("float32")


def conv_module(layer: Layer, layout: str, weight: np.ndarray):
    """One conv2d in ``layout`` ("NCHW" or "NHWC") with ``weight`` (HWIO) as a constant."""
    from tvm import relax

    s, c = layer.size, layer.in_channels
    if layout == "NCHW":
        data_shape, kernel_layout = (1, c, s, s), "OIHW"
        kernel = weight.transpose(3, 2, 0, 1)
    elif layer.groups > 1:  # depthwise NHWC: TFLite's HWOI (H, W, C, 1)
        data_shape, kernel_layout = (1, s, s, c), "HWOI"
        kernel = weight.transpose(0, 1, 3, 2)
    else:
        data_shape, kernel_layout = (1, s, s, c), "HWIO"
        kernel = weight
    x = relax.Var("x", relax.TensorType(data_shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(
                relax.op.nn.conv2d(
                    x,
                    relax.const(np.ascontiguousarray(kernel)),
                    strides=layer.stride,
                    padding=layer.padding,
                    groups=layer.groups,
                    data_layout=layout,
                    kernel_layout=kernel_layout,
                )
            )
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def im2col_module(layer: Layer, weight: np.ndarray):
    """The NHWC convolution as patches copied into a (pixels, kh*kw*in) matrix by an
    operator of its own (kept out of the product's fused operator, so the product is a
    plain matrix product for MetaSchedule), then that matrix times the HWIO weights
    read as a (kh*kw*in, out) matrix, written as NHWC."""
    from tvm import relax, te, topi

    from simpletvm.compiler.lowering import OPAQUE

    s, c, k, stride, p = layer.size, layer.in_channels, layer.kernel, layer.stride, layer.padding
    o = layer.out_size

    def patches(data):
        padded = topi.nn.pad(data, [0, p, p, 0], [0, p, p, 0])
        return te.compute(
            (o * o, k * k * c),
            lambda m, r: padded[
                0, m // o * stride + r // (k * c), m % o * stride + r // c % k, r % c
            ],
            name="im2col",
        )

    def product(columns, matrix):
        r = te.reduce_axis((0, k * k * c), name="r")
        return te.compute(
            (1, o, o, layer.out_channels),
            lambda n, h, w, f: te.sum(columns[h * o + w, r] * matrix[r, f], axis=r),
            name="conv2d_im2col",
        )

    x = relax.Var("x", relax.TensorType((1, s, s, c), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            columns = bb.emit_te(patches, x, primfunc_name_hint="im2col")
            y = bb.emit_te(
                product,
                columns,
                relax.const(np.ascontiguousarray(weight.reshape(k * k * c, -1))),
                primfunc_name_hint="conv2d_im2col",
            )
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()
    gvar = mod.get_global_var("im2col")
    mod[gvar] = mod[gvar].with_attr("op_pattern", OPAQUE)  # FuseOps leaves it alone
    return mod


def tune_and_build(fused, target, options, records_dir: str) -> tuple:
    """Tune every task of ``fused`` (one, two for im2col), build with the records.

    Returns (VirtualMachine, job summary, whether every tuned PrimFunc got a record)."""
    from tvm import relax

    from simpletvm.compiler.build import compile_fused
    from simpletvm.tuning.database import RecordDatabase
    from simpletvm.tuning.job import TuningJob
    from simpletvm.tuning.records import RecordStore

    records = RecordStore(Path(records_dir) / "records.sqlite")
    job = TuningJob(fused, target, options, records=records)
    job.run()
    database = RecordDatabase(records, target.tvm_target(), scope="run", run_id=job.run_id)
    with target.tvm_target(), database:  # check, so an untuned kernel is never timed unnoticed
        applied = relax.transform.MetaScheduleApplyDatabase()(fused)
    scheduled = [
        bool(func.attrs.get("tirx.is_scheduled", False))
        for _, func in applied.functions_items()
        if not isinstance(func, relax.Function)
    ]
    executable = compile_fused(fused, target, database)
    return relax.VirtualMachine(executable, target.device()), job.summary(), all(scheduled)


def cold_samples(vm, repeat: int, evict: np.ndarray) -> list[float]:
    """Seconds of ``repeat`` single calls, each after writing ``evict`` (larger than the
    last-level cache): the layer's weights come from memory, as inside a model whose
    weights exceed the cache."""
    samples = []
    for _ in range(repeat):
        evict += 1.0
        start = time.perf_counter()
        vm.invoke_stateful("main")
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=64, help="per task (a variant has one, im2col two)"
    )
    parser.add_argument("--candidates-per-iteration", type=int, help="default: TuningOptions'")
    parser.add_argument("--population", type=int, help="default: TuningOptions'")
    parser.add_argument("--genetic-iterations", type=int, help="default: TuningOptions'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", default="a,b,c,d", help="comma-separated keys a-i")
    parser.add_argument("--variants", help="comma-separated: nchw,nhwc,f4,f2,im2col (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, alternating")
    parser.add_argument("--repeat", type=int, default=20, help="samples per round")
    parser.add_argument("--min-repeat-ms", type=int, default=20, help="per sample")
    parser.add_argument(
        "--cold", action="store_true", help="time single calls with the caches evicted before each"
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()

    import tvm

    from simpletvm.compiler.lowering import fuse
    from simpletvm.compiler.winograd import apply_winograd
    from simpletvm.hostinfo import host_facts
    from simpletvm.targets import resolve_target
    from simpletvm.tuning.options import TuningOptions

    target = resolve_target("cpu")
    device = target.device()
    search = {
        name: getattr(args, name)
        for name in ("candidates_per_iteration", "population", "genetic_iterations")
        if getattr(args, name) is not None
    }
    options = TuningOptions(trials=args.trials, seed=args.seed, transfer_learning=False, **search)
    work = tempfile.mkdtemp(prefix="simpletvm-layers-")
    layers = [layer for layer in LAYERS if layer.key in args.layers.split(",")]

    evict = np.zeros(64 * 2**20 // 4, dtype="float32")  # 64 MB: twice a 32 MB L3
    built: dict[tuple[str, str], dict] = {}
    for layer in layers:
        weight = weight_hwio(layer)
        x_nhwc = (
            np.random.default_rng(1)
            .standard_normal((1, layer.size, layer.size, layer.in_channels))
            .astype("float32")
        )
        for variant in variants_of(layer, args.variants):
            layout = variant.split()[0]
            module = (
                im2col_module(layer, weight)
                if variant == IM2COL
                else conv_module(layer, layout, weight)
            )
            if variant in WINOGRAD_TILES:
                module, _ = apply_winograd(module, tile_size=WINOGRAD_TILES[variant])
            fused = fuse(module, target, winograd=False)
            start = time.perf_counter()
            vm, summary, applied = tune_and_build(
                fused, target, options, os.path.join(work, f"{layer.key}-{variant}")
            )
            tuning_s = time.perf_counter() - start
            x = x_nhwc if layout == "NHWC" else x_nhwc.transpose(0, 3, 1, 2)
            inputs = [tvm.runtime.tensor(np.ascontiguousarray(x), device)]
            output = vm["main"](*inputs).numpy()
            built[(layer.key, variant)] = {
                "vm": vm,
                "inputs": inputs,
                "samples": [],
                "tuning_s": tuning_s,
                "summary": summary,
                "records_applied": applied,
                "output_nhwc": output if layout == "NHWC" else output.transpose(0, 2, 3, 1),
            }
            best = summary["estimated_latency_s"]
            print(
                f"tuned {layer.name} {variant}: {summary['trials']} trials, "
                f"{summary['errors']} errors, tuner's best "
                f"{best * 1e3:.3f} ms, {tuning_s:.0f} s",
                flush=True,
            )

    for _ in range(args.rounds):
        for entry in built.values():
            vm = entry["vm"]
            vm.set_input("main", *entry["inputs"])
            vm.invoke_stateful("main")  # warm-up: caches, thread pool
            if args.cold:
                entry["samples"].extend(cold_samples(vm, args.repeat, evict))
                continue
            timer = vm.time_evaluator(
                "invoke_stateful",
                device,
                number=1,
                repeat=args.repeat,
                min_repeat_ms=args.min_repeat_ms,
            )
            entry["samples"].extend(float(s) for s in timer("main").results)

    rows = []
    for layer in layers:
        reference = built[(layer.key, "NHWC")]
        reference_ms = float(np.median(reference["samples"])) * 1e3
        for variant in variants_of(layer, args.variants):
            entry = built[(layer.key, variant)]
            median_ms = float(np.median(entry["samples"])) * 1e3
            error = float(
                np.abs(entry["output_nhwc"] - reference["output_nhwc"]).max()
                / np.abs(reference["output_nhwc"]).max()
            )
            rows.append(
                {
                    "layer": layer.name,
                    "layer_key": layer.key,
                    "variant": variant,
                    "trials": entry["summary"]["trials"],
                    "errors": entry["summary"]["errors"],
                    "records_applied": entry["records_applied"],
                    "tuned_ms": median_ms,
                    "tuner_best_ms": entry["summary"]["estimated_latency_s"] * 1e3,
                    "gflops": layer.flops / (median_ms * 1e-3) / 1e9,
                    "speedup_vs_nhwc": reference_ms / median_ms,
                    "relative_error_vs_nhwc": error,
                    "tuning_s": entry["tuning_s"],
                    "samples_ms": [s * 1e3 for s in entry["samples"]],
                }
            )

    print(
        f"\n{args.trials} trials per task, batch {options.candidates_per_iteration}, population "
        f"{options.population}, target {target.spec.get('mcpu')} x{target.spec.get('num-cores')}"
        f"; median of {args.rounds}x{args.repeat} samples"
    )
    print("\n| layer | variant | trials | tuned ms | GFLOP/s | vs NHWC | rel. error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        flag = "" if row["records_applied"] else " (no record applied!)"
        print(
            f"| {row['layer']} | {row['variant']}{flag} | {row['trials']} | "
            f"{row['tuned_ms']:.3f} | {row['gflops']:.1f} | {row['speedup_vs_nhwc']:.2f}x | "
            f"{row['relative_error_vs_nhwc']:.1e} |"
        )
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(
                {
                    "options": vars(args),
                    "tuning_options": options.to_dict(),
                    "target": target.spec,
                    "host": host_facts(),
                    "layers": [asdict(layer) | {"flops": layer.flops} for layer in layers],
                    "rows": rows,
                },
                handle,
                indent=1,
            )
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
