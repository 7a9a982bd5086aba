"""Each layer of a tuned MobileNetV2 against TFLite's XNNPACK kernel for the same layer.

The whole-model comparison says how far SimpleTVM is from TFLite, not where. Here every
fused unit of the Keras MobileNetV2 (a convolution or depthwise convolution with its batch
norm, ReLU6 and, in residual blocks, the add; the stem; the pooling and classifier head)
becomes a model of its own, converted to TFLite as the whole model is and imported into
SimpleTVM from that flatbuffer, so each unit compiles to the tasks the whole model has and
the tuned store's records apply to it. Each pair is timed on the same input, side by side
in alternating rounds, on the same thread count; the table is sorted by the time SimpleTVM
loses (or gains) per inference, the whole model's calls of each unit counted once each.

    python bench/diagnostics/xnnpack_layers.py --store STORE [--image-size 224] [--rounds 10] [--prefixes]

Inputs are staged once, so a unit's time is its kernels and one call (the call alone is
timed too: a ReLU of 8 numbers). A unit alone runs with its input and weights warm in
the caches; inside the model its weights come from wherever the layers before left
them. ``--prefixes`` measures that: the model up to the end of each block, each prefix
timed beside TFLite's, so a block's cost inside the model is its prefix less the one
before, for either framework. ``--evict-mb 64`` reads 64 MB of other memory before each
timed call (one core reads it), so a unit's weights and input come from memory. The
whole model is timed in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common

from simpletvm.hostinfo import host_description
from simpletvm.runtime.comparison import (
    at_thread_counts,
    time_side_by_side,
)

STARTS = ("Conv2D", "DepthwiseConv2D", "ZeroPadding2D", "GlobalAveragePooling2D")


@dataclass
class Unit:
    """Consecutive layers of the model that SimpleTVM fuses into one or two kernels."""

    name: str
    layers: list = field(default_factory=list)
    residual_of: str | None = None  # the unit whose input the unit's Add adds

    @property
    def kind(self) -> str:
        first = next(layer for layer in self.layers if type(layer).__name__ != "ZeroPadding2D")
        kind = type(first).__name__
        if kind == "Conv2D":
            size = first.kernel_size
            kind = f"conv {size[0]}x{size[1]}" + (
                f" s{first.strides[0]}" if first.strides[0] > 1 else ""
            )
        elif kind == "DepthwiseConv2D":
            kind = "depthwise" + (f" s{first.strides[0]}" if first.strides[0] > 1 else "")
        else:
            kind = "head"
        return kind + (" +add" if self.residual_of else "")


def units_of(model) -> list[Unit]:
    """The model's fused units, in order; a block's Add joins the unit before it."""
    units: list[Unit] = []
    block_input: dict[str, Unit] = {}  # a block's name prefix -> its first unit
    for layer in model.layers[1:]:
        kind = type(layer).__name__
        previous = units[-1].layers[-1] if units else None
        follows_pad = previous is not None and type(previous).__name__ == "ZeroPadding2D"
        if kind in STARTS and not follows_pad:
            units.append(Unit(layer.name))
            prefix = layer.name.rsplit("_", 1)[0] + "_"
            block_input.setdefault(prefix, units[-1])
        if kind == "Add":
            prefix = layer.name.rsplit("_", 1)[0] + "_"
            units[-1].residual_of = block_input[prefix].name
        units[-1].layers.append(layer)
    return units


def unit_model(keras, unit: Unit, units: dict[str, Unit]):
    """The unit as a Keras model of its own, sharing the whole model's layers (weights)."""
    first = unit.layers[0]
    x = inputs = keras.Input(first.input.shape[1:], batch_size=1, name="x")
    model_inputs = [inputs]
    for layer in unit.layers:
        if type(layer).__name__ == "Add":
            block_input = units[unit.residual_of].layers[0].input
            residual = keras.Input(block_input.shape[1:], batch_size=1, name="residual")
            model_inputs.append(residual)
            # the operands in the model's order, which the fused kernel keeps
            x = layer([residual if t is block_input else x for t in layer.input])
        else:
            x = layer(x)
    return keras.Model(model_inputs, x, name=unit.name)


def staged_tflite_runner(flatbuffer: bytes, examples: list[np.ndarray], threads: int):
    """TFLite with XNNPACK on every input (matched to ``examples`` by shape), staged
    once: a unit's input is megabytes, and copying it each call would time the copy."""
    import tensorflow as tf

    interpreter = tf.lite.Interpreter(model_content=flatbuffer, num_threads=threads)
    interpreter.allocate_tensors()
    feeds = []
    for detail in interpreter.get_input_details():
        shape = tuple(int(d) for d in detail["shape"])
        feeds.append((detail["index"], next(e for e in examples if e.shape == shape)))
    # the output as a view, not a copy: SimpleTVM's runner returns a view too, and a
    # unit's output is megabytes where the whole model's is 4 KB
    result = interpreter.tensor(interpreter.get_output_details()[0]["index"])

    for index, example in feeds:
        interpreter.set_tensor(index, example)

    def infer() -> np.ndarray:
        interpreter.invoke()
        return result()

    return infer


def staged_simpletvm_runner(stvm, examples: list[np.ndarray]):
    """The built module's ``main`` on every input (matched by shape, staged once as
    TFLite's are), NumPy out."""
    import tvm

    from simpletvm.runtime.loaded import as_numpy

    main = stvm.vm["main"]
    arguments = []
    for spec in stvm.model.inputs:
        example = next(e for e in examples if e.shape == tuple(spec.shape))
        tensor = tvm.runtime.empty(example.shape, str(example.dtype), stvm.target.device())
        np.copyto(np.from_dlpack(tensor), example)
        arguments.append(tensor)

    def infer() -> np.ndarray:
        return as_numpy(main(*arguments))

    return infer


def compare(name, flatbuffer: bytes, examples, args, scratch: Path) -> dict:
    """Build ``flatbuffer`` with the store's records and time it beside TFLite."""
    from simpletvm import BenchmarkingContext, SimpleTVM

    path = scratch / f"{name}.tflite"
    path.write_bytes(flatbuffer)
    context = BenchmarkingContext("cpu", num_threads=args.threads, store=scratch / "store")
    stvm = SimpleTVM(context).from_model(str(path)).build(records=str(args.store))
    build = next(s for s in reversed(context.steps) if s["step"] == "build")
    peer = staged_tflite_runner(flatbuffer, examples, args.threads)
    module = staged_simpletvm_runner(stvm, examples)
    reference = peer().copy()
    difference = float(np.max(np.abs(module() - reference)))
    scale = float(np.max(np.abs(reference))) or 1.0
    if difference > 1e-3 * scale:
        raise SystemExit(f"{name}: SimpleTVM's output is {difference:.3g} from TFLite's")
    with at_thread_counts({"simpletvm": module}, [args.threads]) as runners:
        pair = {"simpletvm": runners["simpletvm"][args.threads], "tflite": peer}
        # with --evict-mb, a unit's weights and input come from wherever reading that much
        # other memory left them, as in a model whose other layers ran in between
        sweep = np.ones(args.evict_mb * 2**20 // 8).sum if args.evict_mb else None
        samples = time_side_by_side(
            pair, args.rounds, args.calls, args.warmup, before_each_call=sweep
        )
    medians = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    return {
        "simpletvm_ms": medians["simpletvm"],
        "tflite_ms": medians["tflite"],
        "ratio": medians["simpletvm"] / medians["tflite"],
        "tasks": build.get("tasks"),
        "tasks_with_records": build.get("tasks_with_records"),
        "max_difference": difference,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a tuned MobileNetV2's store")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", default=None, help="comma-separated unit names")
    parser.add_argument(
        "--evict-mb",
        type=int,
        default=0,
        help="read this many MB of other memory before each timed call (64: out of the L3)",
    )
    parser.add_argument(
        "--prefixes",
        action="store_true",
        help="time the model up to the end of each block instead of each unit alone",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/xnnpack_layers.json"))
    args = parser.parse_args()
    if not args.store.is_dir():
        parser.error(f"--store {args.store}: no such store directory")

    from simpletvm.models.tflite import keras_to_tflite
    from simpletvm.models.zoo import build_keras_model

    model = build_keras_model("mobilenetv2", image_size=args.image_size, alpha=args.alpha)
    import keras

    units = units_of(model)
    by_name = {unit.name: unit for unit in units}
    chosen = set(args.only.split(",")) if args.only else None
    rng = np.random.default_rng(0)
    results = []
    with tempfile.TemporaryDirectory(prefix="xnnpack-layers-") as scratch_dir:
        scratch = Path(scratch_dir)
        # what a call costs either framework beyond its kernels: a ReLU of 8 numbers
        tiny = keras.Sequential([keras.Input((1, 1, 8), batch_size=1), keras.layers.ReLU()])
        example = rng.standard_normal((1, 1, 1, 8)).astype("float32")
        row = {"unit": "call", "kind": "one call"}
        row.update(compare("call", keras_to_tflite(tiny), [example], args, scratch))
        results.append(row)
        print(json.dumps(row), flush=True)
        whole = rng.standard_normal((1, args.image_size, args.image_size, 3)).astype("float32")
        row = {"unit": "model", "kind": "whole model"}
        row.update(compare("model", keras_to_tflite(model), [whole], args, scratch))
        results.append(row)
        print(json.dumps(row), flush=True)
        if args.prefixes:
            for name, end in block_ends(units):
                prefix = keras.Model(model.inputs, end.layers[-1].output, name=f"to_{name}")
                row = {"unit": name, "kind": "prefix", "last": end.name}
                row.update(compare(f"to_{name}", keras_to_tflite(prefix), [whole], args, scratch))
                results.append(row)
                print(json.dumps(row), flush=True)
        for unit in [] if args.prefixes else units:
            if chosen and unit.name not in chosen:
                continue
            sub = unit_model(keras, unit, by_name)
            examples = [
                rng.standard_normal(tuple(int(d) for d in i.shape)).astype("float32")
                for i in sub.inputs
            ]
            row = {"unit": unit.name, "kind": unit.kind, "shape": list(sub.inputs[0].shape[1:])}
            row.update(compare(unit.name, keras_to_tflite(sub), examples, args, scratch))
            results.append(row)
            print(json.dumps(row), flush=True)
    (report_prefixes if args.prefixes else report)(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "host": host_description(),
                "args": vars(args) | {"store": str(args.store), "out": str(args.out)},
                "units": results,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


def block_ends(units: list[Unit]) -> list[tuple[str, Unit]]:
    """Each block's name (``block_5``, ``Conv1``...) and its last unit, in order."""
    ends: dict[str, Unit] = {}
    for unit in units:
        ends[unit.name.rsplit("_", 1)[0] if "_" in unit.name else unit.name] = unit
    return list(ends.items())


def report_prefixes(results: list[dict]) -> None:
    """Each block's cost inside the model: the prefix ending with it less the one before."""
    print(
        f"\n{'block':16} {'SimpleTVM':>10} {'TFLite':>8} {'ratio':>6} {'lost ms':>8}   (in the model)"
    )
    before = {"simpletvm_ms": 0.0, "tflite_ms": 0.0}
    lost_total = 0.0
    for row in (r for r in results if r["kind"] == "prefix"):
        ours = row["simpletvm_ms"] - before["simpletvm_ms"]
        theirs = row["tflite_ms"] - before["tflite_ms"]
        lost_total += ours - theirs
        print(
            f"{row['unit']:16} {ours:10.4f} {theirs:8.4f} "
            f"{ours / theirs if theirs > 0 else float('nan'):6.2f} {ours - theirs:8.4f}"
        )
        before = row
    model = next(r for r in results if r["unit"] == "model")
    print(
        f"  whole model {model['simpletvm_ms']:.3f} ms, TFLite {model['tflite_ms']:.3f} "
        f"({model['ratio']:.2f}); lost over the blocks {lost_total:.3f} ms"
    )


def report(results: list[dict]) -> None:
    """The units by the time SimpleTVM loses, then the sums beside the whole model."""
    units = [r for r in results if r["unit"] not in ("model", "call")]
    calls = {r["unit"]: r for r in results if r["unit"] in ("model", "call")}
    if not units:  # --only named none: the call and the whole model are printed above
        return
    print(f"\n{'unit':28} {'kind':18} {'SimpleTVM':>10} {'TFLite':>8} {'ratio':>6} {'lost ms':>8}")
    for row in sorted(units, key=lambda r: r["tflite_ms"] - r["simpletvm_ms"]):
        print(
            f"{row['unit']:28} {row['kind']:18} {row['simpletvm_ms']:10.4f} "
            f"{row['tflite_ms']:8.4f} {row['ratio']:6.2f} "
            f"{row['simpletvm_ms'] - row['tflite_ms']:8.4f}"
        )
    kinds: dict[str, list[dict]] = {}
    for row in units:
        kinds.setdefault(row["kind"].split(" +")[0].split(" s")[0], []).append(row)
    print("\nby kind:")
    for kind, rows in kinds.items():
        ours = sum(r["simpletvm_ms"] for r in rows)
        theirs = sum(r["tflite_ms"] for r in rows)
        print(
            f"  {kind:12} {len(rows):3} units  {ours:8.3f} ms  TFLite {theirs:8.3f}  {ours / theirs:5.2f}"
        )
    ours = sum(r["simpletvm_ms"] for r in units)
    theirs = sum(r["tflite_ms"] for r in units)
    print(f"  sum of units {ours:.3f} ms, TFLite {theirs:.3f} ({ours / theirs:.2f})")
    if "call" in calls:
        # each unit's call, less the one call a model run makes
        extra = len(units) - 1
        ours -= extra * calls["call"]["simpletvm_ms"]
        theirs -= extra * calls["call"]["tflite_ms"]
        print(
            f"  one call {calls['call']['simpletvm_ms'] * 1e3:.1f} us, TFLite "
            f"{calls['call']['tflite_ms'] * 1e3:.1f}; the units' sum less {extra} calls "
            f"{ours:.3f} ms, TFLite {theirs:.3f} ({ours / theirs:.2f})"
        )
    if "model" in calls:
        model = calls["model"]
        print(
            f"  whole model  {model['simpletvm_ms']:.3f} ms, TFLite {model['tflite_ms']:.3f} "
            f"({model['ratio']:.2f}); the model over its units: "
            f"{model['simpletvm_ms'] / ours:.2f}, TFLite {model['tflite_ms'] / theirs:.2f}"
        )


if __name__ == "__main__":
    main()
