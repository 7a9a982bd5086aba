"""ONNX Runtime's time per node on a built-in model, from its own profiler.

The same ONNX model, threads and input as ``bench/peers.py``; ONNX Runtime's profiler
times every node of ``--runs`` calls (after ``--warmup``) and this prints each node's
median, slowest first, with its input shapes: what a tuned module's tasks are up against,
layer by layer. The profiler costs time per node, so the sum runs above an unprofiled call.

    python bench/diagnostics/onnxruntime_layers.py --model resnet18 [--image-size 224] [--alpha A]
                                       [--threads 2] [--runs 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common

from simpletvm.runtime.peers import keras_to_onnx


def node_medians(profile_path: str, runs: int) -> list[tuple[float, str, str, list]]:
    """(median µs over the last ``runs`` calls, node, op type, input shapes), slowest first."""
    durations: dict[str, list[float]] = defaultdict(list)
    about: dict[str, tuple[str, list]] = {}
    for event in json.loads(Path(profile_path).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            name = event["name"][: -len("_kernel_time")]
            durations[name].append(event["dur"])
            shapes = [next(iter(s.values())) for s in event["args"].get("input_type_shape", [])]
            about[name] = (event["args"].get("op_name", "?"), shapes)
    return sorted(
        (
            (statistics.median(times[-runs:]), name, *about[name])
            for name, times in durations.items()
        ),
        reverse=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--alpha", type=float, default=None, help="MobileNet width")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    import onnxruntime as ort

    from simpletvm.models.zoo import build_keras_model

    options = {"alpha": args.alpha} if args.alpha is not None else {}
    keras_model = build_keras_model(args.model, args.image_size, **options)
    example = (
        np.random.default_rng(0)
        .standard_normal((1, args.image_size, args.image_size, 3))
        .astype("float32")
    )
    scratch = tempfile.TemporaryDirectory(prefix="onnxruntime-layers-")
    onnx_path = keras_to_onnx(keras_model, example.shape, Path(scratch.name) / "model.onnx")

    session_options = ort.SessionOptions()  # as bench/peers.py's runner, profiled
    session_options.intra_op_num_threads = args.threads
    session_options.inter_op_num_threads = 1
    session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session_options.enable_profiling = True
    session_options.profile_file_prefix = str(Path(scratch.name) / "profile")
    session = ort.InferenceSession(
        str(onnx_path), session_options, providers=["CPUExecutionProvider"]
    )
    feed = {session.get_inputs()[0].name: example}
    for _ in range(args.warmup):
        session.run(None, feed)
    start = time.perf_counter()
    for _ in range(args.runs):
        session.run(None, feed)
    per_call_ms = (time.perf_counter() - start) / args.runs * 1e3
    rows = node_medians(session.end_profiling(), args.runs)

    print(
        f"{args.model} {args.image_size}x{args.image_size}, {args.threads} threads: "
        f"{per_call_ms:.3f} ms a call profiled; node medians sum to "
        f"{sum(r[0] for r in rows) / 1e3:.3f} ms"
    )
    for microseconds, name, op, shapes in rows:
        print(f"{microseconds / 1e3:8.3f} ms  {op:18s} {shapes}  {name}")


if __name__ == "__main__":
    main()
