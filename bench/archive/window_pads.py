"""What reading depthwise padding in place buys inside the model: the untuned build of a
model with its depthwise convolutions' pads inlined (the default) against the same build
with each pad a copy of the whole input (``lowering={"window_pads": False}``).

Both builds are exported and timed in one worker process in alternating rounds, each
kernel from the fork-join pool's record of its parallel loops
(:func:`simpletvm.runtime.in_situ.time_builds`), so the host's drift hits both alike.
Outputs are checked equal first. Printed: the whole model and every kernel that differs
by more than 5%, in ms per model run, and the ratio (in place / copy: below 1 faster).

    python bench/archive/window_pads.py [--models mobilenetv2,quickstart,resnet18,FILE.tflite]
                                [--threads 2] [--rounds 8] [--runs 10]
                                [--out bench/results/window_pads.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common
from bench.common.models import BUILTIN
from simpletvm.api import MODULE_FILE
from simpletvm.hostinfo import host_description


def untuned_build(name: str, window_pads: bool, threads: int, scratch: Path, example):
    """The model's untuned module exported to ``scratch``, and its output for ``example``."""
    from simpletvm import BenchmarkingContext, SimpleTVM

    context = BenchmarkingContext("cpu", num_threads=threads, store=scratch / "store")
    lowering = {"window_pads": window_pads}
    if name.endswith(".tflite"):
        stvm = SimpleTVM(context).from_model(name, lowering=lowering)
    else:
        model, options = BUILTIN[name]
        stvm = SimpleTVM(context).from_model(model, lowering=lowering, **options)
    stvm.build(records=None)
    if example is None:
        spec = stvm.model.inputs[0]
        example = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    output = stvm.run(example)
    directory = scratch / ("in-place" if window_pads else "copy")
    stvm.save(directory)
    return (
        directory / MODULE_FILE,
        example,
        np.asarray(output[0] if isinstance(output, list) else output),
    )


def compare(name: str, args) -> dict:
    from simpletvm.runtime.in_situ import WHOLE, time_builds

    with tempfile.TemporaryDirectory(prefix="window-pads-") as scratch_dir:
        scratch = Path(scratch_dir)
        in_place, example, expected = untuned_build(name, True, args.threads, scratch, None)
        copy, _, copied = untuned_build(name, False, args.threads, scratch, example)
        difference = float(np.max(np.abs(expected - copied)))
        if difference > 1e-3 * float(np.max(np.abs(copied))):
            raise SystemExit(f"{name}: outputs differ by {difference}")
        timed = time_builds(
            [in_place, copy],
            [(list(example.shape), str(example.dtype))],
            threads=args.threads,
            rounds=args.rounds,
            runs=args.runs,
        )
    in_place_ms, copy_ms = timed.medians
    kernels = {
        kernel: {"in_place_ms": in_place_ms.get(kernel, 0.0), "copy_ms": ms}
        for kernel, ms in copy_ms.items()
    }
    return {
        "model": name,
        "whole_in_place_ms": in_place_ms[WHOLE],
        "whole_copy_ms": copy_ms[WHOLE],
        "ratio": in_place_ms[WHOLE] / copy_ms[WHOLE],
        "largest_difference": difference,
        "kernels": kernels,
    }


def print_result(result: dict) -> None:
    print(
        f"{result['model']}: whole {result['whole_in_place_ms']:.3f} ms in place, "
        f"{result['whole_copy_ms']:.3f} ms with copies, ratio {result['ratio']:.3f}"
    )
    for kernel, times in sorted(result["kernels"].items(), key=lambda item: -item[1]["copy_ms"]):
        ratio = times["in_place_ms"] / times["copy_ms"] if times["copy_ms"] else 1.0
        if abs(ratio - 1) > 0.05 and kernel != "whole":
            print(
                f"  {kernel:48s} {times['in_place_ms']:.3f} / {times['copy_ms']:.3f} = {ratio:.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenetv2,quickstart,resnet18")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench/results/window_pads.json"))
    args = parser.parse_args()
    results = {"host": host_description(), "threads": args.threads, "models": []}
    for name in args.models.split(","):
        results["models"].append(compare(name, args))
        print_result(results["models"][-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
