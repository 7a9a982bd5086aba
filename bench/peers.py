"""Batch-1 inference latency against the frameworks users would otherwise pick.

One run, one machine, the same models (built-in Keras architectures with seeded random
weights), the same input and the same thread count for every framework:

- TensorFlow, graph mode (a concrete ``tf.function``)
- TensorFlow Lite with its default XNNPACK delegate (float32, converted from Keras)
- ONNX Runtime (all graph optimizations) and OpenVINO (CPU, latency hint, one stream,
  float32 inference precision) on one ONNX model the bench exports itself from the same
  Keras model (tf2onnx, opset 17, the example's input shape)
- TVM untuned, and TVM tuned by SimpleTVM with the trial budget given here

A peer whose package is not installed (ONNX Runtime, OpenVINO) is left out and the
report says so. Every framework's output is checked against TensorFlow's before timing.
Timing is wall-clock per call from Python, what a user's inference loop sees, in
alternating rounds so that drift on a shared machine hits every framework alike, each
turn opening with untimed warm-up calls (the untuned build, a hundred times slower, is
timed after the rounds, so that they stay seconds long); the table gives medians and the
ratio to the fastest peer (TensorFlow, TFLite, ONNX Runtime, OpenVINO; below 1: faster
than every peer). It also gives each framework's achieved GFLOP/s (the model's FLOPs, 2 per
multiply-add of its Conv2D, DepthwiseConv2D and Dense layers, over the median time)
and that rate as a fraction of this machine's sgemm rate and of its FMA peak, both
measured in the same run: ``numpy.matmul`` of float32 square matrices on the same thread
count, best of several, and cores doing nothing but vector FMAs (``bench/diagnostics/fma_peak.py``).
The host (CPU model, LLVM's name for the CPU) heads the report. The tuned model's tuning
time, trial budget and tuning curve (MetaSchedule's whole-model estimate against trials)
are written beside the table.

    python bench/peers.py [--models mobilenetv2,resnet18] [--minutes 30] [--trials N]
                          [--total-trials N] [--threads 2] [--sgemm-size 2048]
                          [--out bench/results/peers]
    python bench/peers.py --retime bench/results/peers/peers.json --out bench/results/again
    python bench/peers.py --untuned --out bench/results/untuned

``--retime`` times the modules an earlier run tuned and saved (its stores under the
system's temporary directory must still exist) against the peers again, without tuning:
the host's speed drifts between runs, and a tuning of 30 minutes need not be repeated to
time its result in a quieter moment.

``--untuned`` tunes nothing: the untuned build (every kernel on its default schedule)
is timed with the peers, in the rounds, and its build time reported.

Tuning options not given keep SimpleTVM's defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common

from bench.common.host import fma_peak, fma_peak_program, sgemm_rate
from bench.common.models import model_flops
from simpletvm.hostinfo import host_description
from simpletvm.runtime.peers import (
    keras_to_onnx,
    onnxruntime_runner,
    openvino_runner,
    tensorflow_runner,
    tflite_keras_runner,
)

PEERS = ("tensorflow", "tflite", "onnxruntime", "openvino")


def tune_model(model: str, args, store: str, out: Path) -> tuple:
    """Tune ``model`` from scratch with the given budget and build it: the tuned session,
    the tuning's summary and its curve."""
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.tuning import tuning_curve

    context = BenchmarkingContext("cpu", num_threads=args.threads, store=store)
    tuned = SimpleTVM(context).from_model(model, image_size=args.image_size)
    start = time.perf_counter()
    budget = {
        "trials": args.trials,
        "total_trials": args.total_trials,
        "minutes": args.minutes,
        "candidates_per_iteration": args.candidates_per_iteration,
        "population": args.population,
    }
    # what is not given keeps SimpleTVM's defaults: the bench measures what users get
    tuned.autotune(
        **{k: v for k, v in budget.items() if v is not None}, transfer_learning=False, seed=0
    )
    tuning_s = time.perf_counter() - start
    tuned.build(records="run").save()  # kept for --retime and bench/diagnostics/runtime_threads.py
    build_step = next(step for step in reversed(tuned.context.steps) if step["step"] == "build")
    curve = tuning_curve(tuned.context)
    curve.to_csv(out / f"{model}-curve.csv", index=False)
    summary = tuned.context.tuning
    tuning = {
        "seconds": tuning_s,
        "trials": summary["trials"],
        "run_id": tuned.context.run_id,
        "store": store,
        "tasks": summary["num_tasks"],
        "estimated_ms": summary["estimated_latency_s"] * 1e3,
        "search_estimated_ms": summary["search_estimated_latency_s"] * 1e3,
        "remeasured": summary["remeasured"],
        # where the budget went: seconds per stage kind, and each task's share
        "stage_seconds": tuned.context.stage_durations(),
        "task_summary": summary["tasks"],
        "options": tuned.context.parameters.get("autotune", {}),
        "conv_forms": build_step.get("conv_forms", []),
    }
    points = (
        curve.iloc[np.linspace(0, len(curve) - 1, min(len(curve), 9)).astype(int)].to_dict(
            "records"
        )
        if len(curve)
        else []
    )
    return tuned, tuning, points


def load_tuned(earlier: dict, threads: int) -> tuple:
    """The module an earlier run of this bench tuned and saved (``earlier``: its entry in
    peers.json), with that run's tuning summary and curve, to time it again without
    tuning again (a host whose speed drifts between runs gets a second look)."""
    from simpletvm import BenchmarkingContext, SimpleTVM

    tuning = earlier["tuning"]
    context = BenchmarkingContext("cpu", num_threads=threads, store=tuning["store"])
    return SimpleTVM(context).load(tuning["run_id"]), dict(tuning), earlier["curve"]


def bench_model(
    model: str, args, store: str, out: Path, scratch: Path, host: dict, earlier: dict | None = None
) -> dict:
    """Tune ``model`` (or load what ``earlier`` tuned) and time it side by side with the
    peers and the untuned build."""
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.models.zoo import build_keras_model
    from simpletvm.runtime.comparison import simpletvm_runner, time_side_by_side

    example = (
        np.random.default_rng(0)
        .standard_normal((1, args.image_size, args.image_size, 3))
        .astype("float32")
    )
    began = time.perf_counter()
    untuned = (
        SimpleTVM(BenchmarkingContext("cpu", num_threads=args.threads, store=store))
        .from_model(model, image_size=args.image_size)
        .build(records=None)
    )
    untuned_build_s = time.perf_counter() - began
    if args.untuned:
        tuned, tuning, curve = None, None, []
    elif earlier is None:
        tuned, tuning, curve = tune_model(model, args, store, out)
    else:
        tuned, tuning, curve = load_tuned(earlier, args.threads)
        tuning["retimed"] = True

    keras_model = build_keras_model(model, args.image_size)
    flops = model_flops(keras_model)

    @cache
    def onnx_model() -> Path:
        return keras_to_onnx(
            keras_model, example.shape, scratch / f"{model}-{args.image_size}.onnx"
        )

    makers = {
        "tensorflow": lambda: tensorflow_runner(keras_model, example),
        "tflite": lambda: tflite_keras_runner(keras_model, example, args.threads),
        "onnxruntime": lambda: onnxruntime_runner(onnx_model(), example, args.threads),
        "openvino": lambda: openvino_runner(onnx_model(), example, args.threads),
    }
    runners, missing = {}, {}
    for name, make in makers.items():
        try:
            runners[name] = make()
        except ImportError as error:  # an optional peer not installed: go on without it
            missing[name] = str(error)
    runners["tvm untuned"] = simpletvm_runner(untuned, example)
    if tuned is not None:
        runners["tvm tuned"] = simpletvm_runner(tuned, example)
    reference = runners["tensorflow"]()
    agreement, relative = {}, {}
    for name, infer in runners.items():
        output = infer()
        agreement[name] = float(np.abs(output - reference).max())
        relative[name] = agreement[name] / max(float(np.abs(reference).max()), 1e-30)
        if not np.allclose(output, reference, rtol=1e-3, atol=1e-5):
            raise SystemExit(
                f"{model}: {name} disagrees with TensorFlow "
                f"(max abs difference {agreement[name]:.3g})"
            )
    # beside a tuned module the untuned build (TVM's naive kernels were a hundred times
    # slower) is timed after the rounds, alone: inside them its turns put the tuned
    # module and the peers far apart in time. With --untuned it is in the rounds.
    untuned_runner = {} if args.untuned else {"tvm untuned": runners.pop("tvm untuned")}
    samples = time_side_by_side(runners, args.rounds, args.calls, args.warmup)
    if untuned_runner:
        samples.update(time_side_by_side(untuned_runner, 1, args.calls, args.warmup))
    medians = {name: float(np.median(s)) * 1e3 for name, s in samples.items()}
    fastest_peer = min((peer for peer in PEERS if peer in medians), key=medians.__getitem__)
    sgemm = sgemm_rate(args.threads, args.sgemm_size)  # right after the timing, same load
    peak = fma_peak(fma_peak_program(scratch), args.threads)  # compiled for the first model
    gflops = {name: flops / (m * 1e-3) / 1e9 for name, m in medians.items()}
    if tuning is not None:
        tuning["measured_to_estimate"] = medians["tvm tuned"] / tuning["estimated_ms"]
    return {
        "model": model,
        "image_size": args.image_size,
        "threads": args.threads,
        "host": host,
        "model_gflop": flops / 1e9,
        "missing_peers": missing,
        "untuned_build_s": untuned_build_s,
        "median_ms": medians,
        "p90_ms": {name: float(np.percentile(s, 90)) * 1e3 for name, s in samples.items()},
        "ratio_to_fastest_peer": {name: m / medians[fastest_peer] for name, m in medians.items()},
        "fastest_peer": fastest_peer,
        "gflops": gflops,
        "fraction_of_sgemm": {name: rate / sgemm["gflops"] for name, rate in gflops.items()},
        "fraction_of_fma_peak": {name: rate / peak["gflops"] for name, rate in gflops.items()},
        "sgemm": sgemm,
        "fma_peak": peak,
        "max_abs_difference_to_tensorflow": agreement,
        "relative_error_to_tensorflow": relative,
        "tuning": tuning,
        "curve": curve,
    }


def print_report(result: dict) -> None:
    medians, ratios = result["median_ms"], result["ratio_to_fastest_peer"]
    tuning = result["tuning"]
    sgemm = result["sgemm"]
    print(
        f"\n{result['model']} {result['image_size']}x{result['image_size']}, batch 1, "
        f"{result['threads']} threads, {result['model_gflop']:.3f} GFLOP per call "
        f"(fastest peer: {result['fastest_peer']})"
    )
    host = result["host"]
    print(
        f"  host: {host['cpu']} (LLVM cpu {host['llvm_cpu']}), {host['logical_cores']} "
        f"logical cores"
    )
    print(
        f"  {'framework':<13} {'median ms':>10} {'p90 ms':>9} {'x fastest peer':>15} "
        f"{'GFLOP/s':>8} {'of sgemm':>9} {'of peak':>8} {'rel. error to TF':>17}"
    )
    for name in medians:
        print(
            f"  {name:<13} {medians[name]:>10.3f} {result['p90_ms'][name]:>9.3f} "
            f"{ratios[name]:>15.2f} {result['gflops'][name]:>8.1f} "
            f"{result['fraction_of_sgemm'][name]:>9.1%} "
            f"{result['fraction_of_fma_peak'][name]:>8.1%} "
            f"{result.get('relative_error_to_tensorflow', {}).get(name, float('nan')):>17.2e}"
        )
    for name, reason in result["missing_peers"].items():
        print(f"  {name:<13} not run: {reason}")
    print(
        f"  sgemm (numpy.matmul, float32 {sgemm['n']}x{sgemm['n']}, {sgemm['blas']}, "
        f"{sgemm['threads']} threads): {sgemm['gflops']:.1f} GFLOP/s, best of "
        f"{sgemm['repeats']} (median {sgemm['median_gflops']:.1f})"
    )
    peak = result["fma_peak"]
    print(
        f"  FMA peak ({peak['lanes']} float32 lanes, {peak['threads']} threads): "
        f"{peak['gflops']:.1f} GFLOP/s"
    )
    print(f"  untuned build (default schedules): {result['untuned_build_s']:.1f} s")
    if tuning is None:  # --untuned
        return
    options = tuning["options"]
    print(
        f"  tuned with {tuning['trials']} trials over {tuning['tasks']} tasks "
        f"(at most {options.get('trials')} per task, {options.get('total_trials') or 'no'} "
        f"in all, {options.get('minutes') or 'no'} minutes budget, batch "
        f"{options.get('candidates_per_iteration', options.get('batch_size'))}, population {options.get('population')}) "
        f"in {tuning['seconds']:.0f} s"
    )
    if "stage_seconds" in tuning:  # (peers.json files of earlier versions lack it)
        print(
            "  tuning time by stage: "
            + ", ".join(
                f"{stage} {seconds:.0f} s" for stage, seconds in tuning["stage_seconds"].items()
            )
        )
    print(
        f"  estimate {tuning['estimated_ms']:.3f} ms (the search's "
        f"{tuning['search_estimated_ms']:.3f} ms before {tuning['remeasured']} of its best "
        f"records were timed again); measured / estimate "
        f"{tuning['measured_to_estimate']:.2f}"
    )
    print(
        f"  tuned module: run {tuning['run_id']} in store {tuning['store']}"
        + (
            " (tuned by an earlier run of this bench, timed again here)"
            if tuning.get("retimed")
            else ""
        )
    )
    for choice in tuning["conv_forms"]:
        estimates = ", ".join(
            f"{form} {'-' if ms is None else f'{ms:.3f} ms'}"
            for form, ms in choice["estimate_ms"].items()
        )
        print(f"  {choice['layer']}: built as {choice['form']} ({estimates})")
    if result["curve"]:
        print("  tuning curve (MetaSchedule's whole-model estimate):")
        for point in result["curve"]:
            print(
                f"    {point['trials']:>6} trials {point['elapsed_s']:>7.0f} s "
                f"{point['estimated_latency_ms']:>9.3f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default=None,
        help="comma-separated (default: mobilenetv2,resnet18, or those --retime names)",
    )
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--minutes", type=float, default=None, help="wall-clock tuning budget per model"
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help="measured candidates per task (default: SimpleTVM's)",
    )
    parser.add_argument(
        "--total-trials",
        type=int,
        default=None,
        help="cap over all tasks; the gradient task order spends it where the latency is",
    )
    parser.add_argument("--candidates-per-iteration", type=int, default=None)
    parser.add_argument("--population", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per round")
    parser.add_argument(
        "--warmup", type=int, default=5, help="untimed calls at the start of each turn"
    )
    parser.add_argument(
        "--sgemm-size",
        type=int,
        default=2048,
        help="n of the n x n float32 matmul that gives the machine's rate",
    )
    parser.add_argument(
        "--untuned",
        action="store_true",
        help="no tuning: time the untuned build (its default schedules) in the rounds",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/peers"))
    parser.add_argument(
        "--retime",
        type=Path,
        default=None,
        metavar="PEERS_JSON",
        help="time again the models an earlier run tuned (its peers.json; "
        "their stores must still exist) instead of tuning",
    )
    args = parser.parse_args()
    earlier = {}
    if args.retime is not None:
        try:
            text = args.retime.read_text()
        except OSError as error:
            parser.error(f"--retime: cannot read {args.retime} ({error.strerror})")
        try:
            earlier = {entry["model"]: entry for entry in json.loads(text)}
        except (ValueError, KeyError, TypeError) as error:
            parser.error(f"--retime {args.retime}: not a peers.json of this bench ({error})")
        given = [
            f"--{name.replace('_', '-')}"
            for name in (
                "minutes",
                "trials",
                "total_trials",
                "candidates_per_iteration",
                "population",
            )
            if getattr(args, name) is not None
        ]
        if given or args.untuned:
            parser.error(
                f"--retime times modules tuned before: "
                f"{', '.join(given + (['--untuned'] if args.untuned else []))} would not be used"
            )
        args.models = args.models or ",".join(earlier)
        unknown = [m for m in args.models.split(",") if m not in earlier]
        if unknown:
            parser.error(
                f"--retime {args.retime} holds no tuned {', '.join(unknown)} "
                f"(it has {', '.join(earlier) or 'none'})"
            )
        gone = [
            earlier[m]["tuning"]["store"]
            for m in args.models.split(",")
            if not Path(earlier[m]["tuning"]["store"]).is_dir()
        ]
        if gone:
            parser.error(
                f"--retime {args.retime}: the store of its tuned modules is gone "
                f"({', '.join(gone)}); tune again"
            )
        args.image_size = next(iter(earlier.values()))["image_size"]
    if args.untuned:
        given = [
            f"--{name.replace('_', '-')}"
            for name in ("minutes", "trials", "total_trials", "candidates_per_iteration")
            if getattr(args, name) is not None
        ]
        if given:
            parser.error(f"--untuned tunes nothing: {', '.join(given)} would not be used")
    args.models = args.models or "mobilenetv2,resnet18"

    # every framework gets the same threads: TVM's runtime pool, TF's intra-op pool
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="simpletvm-peers-"))
    store = str(scratch / "store")
    host = host_description()
    results = []
    for model in args.models.split(","):
        result = bench_model(model, args, store, args.out, scratch, host, earlier.get(model))
        print_report(result)
        results.append(result)
    (args.out / "peers.json").write_text(json.dumps(results, indent=2))
    print(f"\nresults: {args.out}/peers.json, tuning curves: {args.out}/<model>-curve.csv")


if __name__ == "__main__":
    main()
