"""Batch-1 inference latency against the frameworks users would otherwise pick.

One run, one machine, the same models (built-in Keras architectures with seeded random
weights), the same input and the same thread count for every framework:

- TensorFlow, graph mode (a concrete ``tf.function``)
- TensorFlow Lite with its default XNNPACK delegate (float32, converted from Keras)
- ONNX Runtime (all graph optimizations) on the ONNX model TVM imports
- TVM untuned, and TVM tuned by SimpleTVM with the trial budget given here

Every framework's output is checked against TensorFlow's before timing. Timing is
wall-clock per call from Python, what a user's inference loop sees, in alternating rounds
so that drift on a shared machine hits every framework alike, each turn opening with
untimed warm-up calls; the table gives medians and the ratio to the fastest of
TensorFlow, TFLite and ONNX Runtime (below 1: faster than every peer). The tuned
model's tuning time, trial budget and tuning curve (MetaSchedule's whole-model estimate
against trials) are written beside the table.

    python bench/peers.py [--models mobilenetv2,resnet18] [--trials 16] [--total-trials N]
                          [--threads 2] [--out bench/results/peers]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

PEERS = ("tensorflow", "tflite", "onnxruntime")


def tensorflow_runner(keras_model, example: np.ndarray) -> Callable[[], np.ndarray]:
    import tensorflow as tf

    concrete = tf.function(keras_model).get_concrete_function(
        tf.TensorSpec(example.shape, tf.float32))
    tensor = tf.constant(example)
    return lambda: concrete(tensor).numpy()


def tflite_runner(keras_model, example: np.ndarray, threads: int) -> Callable[[], np.ndarray]:
    import tensorflow as tf

    flatbuffer = tf.lite.TFLiteConverter.from_keras_model(keras_model).convert()
    interpreter = tf.lite.Interpreter(model_content=flatbuffer, num_threads=threads)
    interpreter.allocate_tensors()
    source = interpreter.get_input_details()[0]["index"]
    result = interpreter.get_output_details()[0]["index"]

    def infer() -> np.ndarray:
        interpreter.set_tensor(source, example)
        interpreter.invoke()
        return interpreter.get_tensor(result)
    return infer


def onnxruntime_runner(onnx_path: Path, example: np.ndarray, threads: int) -> Callable[[], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: example})[0]


def tvm_runner(stvm, example: np.ndarray) -> Callable[[], np.ndarray]:
    """The built module's entry function, fed like ONNX Runtime: NumPy in, NumPy out."""
    import tvm

    device = stvm.target.device()
    main = stvm._vm["main"]
    return lambda: main(tvm.runtime.tensor(example, device)).numpy()


def time_side_by_side(runners: dict[str, Callable], rounds: int, calls: int,
                      warmup: int) -> dict[str, list[float]]:
    """Per-call seconds of every runner, the runners taking turns round by round.

    Each turn starts with ``warmup`` untimed calls: the runner before it leaves the
    caches holding its own data (a 160 ms untuned TVM call slowed the tuned one after it
    by a quarter), and a framework is timed in its steady state, not in its neighbour's."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, infer in runners.items():
            for _ in range(warmup):
                infer()
            for _ in range(calls):
                start = time.perf_counter()
                infer()
                samples[name].append(time.perf_counter() - start)
    return samples


def onnx_file(store: str, model: str, image_size: int) -> Path:
    """The ONNX model SimpleTVM imported (cached in the store by the built-in importer)."""
    matches = [path for path in sorted(Path(store).rglob("*.onnx"))
               if f"name={model}-" in path.name and f"image_size={image_size}-" in path.name]
    if not matches:
        raise FileNotFoundError(f"no cached ONNX for {model} at {image_size} under {store}")
    return matches[0]


def bench_model(model: str, args, store: str, out: Path) -> dict:
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.models.zoo import build_keras_model
    from simpletvm.tuning import tuning_curve

    options = {"image_size": args.image_size}
    example = np.random.default_rng(0).standard_normal(
        (1, args.image_size, args.image_size, 3)).astype("float32")

    def session() -> SimpleTVM:
        context = BenchmarkingContext("cpu", num_threads=args.threads, store=store)
        return SimpleTVM(context).from_model(model, **options)

    untuned = session().build(records=None)
    tuned = session()
    start = time.perf_counter()
    tuned.autotune(trials=args.trials, total_trials=args.total_trials,
                   batch_size=args.batch_size, population=args.population,
                   transfer_learning=False, seed=0)
    tuning_s = time.perf_counter() - start
    tuned.build(records="run")
    curve = tuning_curve(tuned.context)
    curve.to_csv(out / f"{model}-curve.csv", index=False)

    keras_model = build_keras_model(model, args.image_size)
    runners = {
        "tensorflow": tensorflow_runner(keras_model, example),
        "tflite": tflite_runner(keras_model, example, args.threads),
        "onnxruntime": onnxruntime_runner(onnx_file(store, model, args.image_size), example,
                                          args.threads),
        "tvm untuned": tvm_runner(untuned, example),
        "tvm tuned": tvm_runner(tuned, example),
    }
    reference = runners["tensorflow"]()
    agreement = {}
    for name, infer in runners.items():
        output = infer()
        agreement[name] = float(np.abs(output - reference).max())
        if not np.allclose(output, reference, rtol=1e-3, atol=1e-5):
            raise SystemExit(f"{model}: {name} disagrees with TensorFlow "
                             f"(max abs difference {agreement[name]:.3g})")
    samples = time_side_by_side(runners, args.rounds, args.calls, args.warmup)
    medians = {name: float(np.median(s)) * 1e3 for name, s in samples.items()}
    fastest_peer = min(PEERS, key=medians.__getitem__)
    summary = tuned.context.tuning
    return {
        "model": model, "image_size": args.image_size, "threads": args.threads,
        "median_ms": medians,
        "p90_ms": {name: float(np.percentile(s, 90)) * 1e3 for name, s in samples.items()},
        "ratio_to_fastest_peer": {name: m / medians[fastest_peer] for name, m in medians.items()},
        "fastest_peer": fastest_peer,
        "max_abs_difference_to_tensorflow": agreement,
        "tuning": {"seconds": tuning_s, "trials": summary["trials"],
                   "tasks": summary["num_tasks"], "trials_per_task": args.trials,
                   "total_trials": args.total_trials,
                   "batch_size": args.batch_size, "population": args.population},
        "curve": curve.iloc[np.linspace(0, len(curve) - 1, min(len(curve), 9)).astype(int)]
                 .to_dict("records") if len(curve) else [],
    }


def print_report(result: dict) -> None:
    medians, ratios = result["median_ms"], result["ratio_to_fastest_peer"]
    tuning = result["tuning"]
    print(f"\n{result['model']} {result['image_size']}x{result['image_size']}, batch 1, "
          f"{result['threads']} threads (fastest peer: {result['fastest_peer']})")
    print(f"  {'framework':<13} {'median ms':>10} {'p90 ms':>9} {'x fastest peer':>15} "
          f"{'max |diff| to TF':>17}")
    for name in medians:
        print(f"  {name:<13} {medians[name]:>10.3f} {result['p90_ms'][name]:>9.3f} "
              f"{ratios[name]:>15.2f} {result['max_abs_difference_to_tensorflow'][name]:>17.2e}")
    print(f"  tuned with {tuning['trials']} trials over {tuning['tasks']} tasks "
          f"(at most {tuning['trials_per_task']} per task, {tuning['total_trials'] or 'no'} "
          f"in all, batch {tuning['batch_size']}) "
          f"in {tuning['seconds']:.0f} s")
    if result["curve"]:
        print("  tuning curve (MetaSchedule's whole-model estimate):")
        for point in result["curve"]:
            print(f"    {point['trials']:>6} trials {point['elapsed_s']:>7.0f} s "
                  f"{point['estimated_latency_ms']:>9.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenetv2,resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trials", type=int, default=16, help="measured candidates per task")
    parser.add_argument("--total-trials", type=int, default=None,
                        help="cap over all tasks; the gradient task order spends it where "
                             "the latency is")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--population", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per round")
    parser.add_argument("--warmup", type=int, default=5,
                        help="untimed calls at the start of each turn")
    parser.add_argument("--out", type=Path, default=Path("bench/results/peers"))
    args = parser.parse_args()

    # every framework gets the same threads: TVM's runtime pool, TF's intra-op pool
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    args.out.mkdir(parents=True, exist_ok=True)
    store = tempfile.mkdtemp(prefix="simpletvm-peers-")
    results = []
    for model in args.models.split(","):
        result = bench_model(model, args, store, args.out)
        print_report(result)
        results.append(result)
    (args.out / "peers.json").write_text(json.dumps(results, indent=2))
    print(f"\nresults: {args.out}/peers.json, tuning curves: {args.out}/<model>-curve.csv")


if __name__ == "__main__":
    main()
