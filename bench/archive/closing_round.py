"""What the closing round (``remeasure``) does to the built model, on one search.

Tunes a built-in model (default: the quickstart's) with the closing round off, copies
the run's records, runs the closing round alone on the copy (the same run id resumed
with its trial budget spent: only the round is left), builds the model from each copy
and times the two builds and TFLite (XNNPACK) side by side, in alternating rounds. Both
builds come from the same search, so the difference is the round's choice of records.

    python bench/archive/closing_round.py --minutes 5 --out bench/results/closing_round.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenetv2")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--alpha", type=float, default=0.35)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--remeasure", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep both stores (printed)")
    args = parser.parse_args()

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.models.tflite import keras_to_tflite
    from simpletvm.models.zoo import build_keras_model
    from simpletvm.runtime.comparison import simpletvm_runner, tflite_runner, time_side_by_side

    options = {"image_size": args.image_size, "seed": 0}
    if "mobilenet" in args.model:
        options["alpha"] = args.alpha
    scratch = Path(tempfile.mkdtemp(prefix="simpletvm-closing-"))
    # every core, as the search measured: both builds are timed on the same count
    search = SimpleTVM(
        BenchmarkingContext("cpu", store=scratch / "search", num_threads=os.cpu_count())
    )
    search.from_model(args.model, **options)
    search.autotune(minutes=args.minutes, seed=0, remeasure=0).build(records="run")
    run_id = search.context.run_id
    shutil.copytree(
        scratch / "search", scratch / "closing", ignore=shutil.ignore_patterns("*.lock")
    )

    closing = SimpleTVM(
        BenchmarkingContext(
            "cpu", store=scratch / "closing", run_id=run_id, num_threads=os.cpu_count()
        )
    )
    closing.from_model(args.model, **options)
    trials = search.tuning_summary["trials"]
    closing.autotune(total_trials=trials, seed=0, remeasure=args.remeasure)
    closing.build(records="run")
    summary = closing.tuning_summary

    example = (
        np.random.default_rng(0)
        .standard_normal((1, args.image_size, args.image_size, 3))
        .astype("float32")
    )
    flatbuffer = keras_to_tflite(build_keras_model(args.model, **options))
    threads = search.target.spec.get("num-cores", 1)
    runners = {
        "search's records": simpletvm_runner(search, example),
        "after the closing round": simpletvm_runner(closing, example),
        "tflite": tflite_runner(flatbuffer, example, threads),
    }
    samples = time_side_by_side(runners, rounds=args.rounds, calls=args.calls, warmup=5)
    medians = {name: float(np.median(s)) * 1e3 for name, s in samples.items()}
    result = {
        "model": args.model,
        "options": options,
        "minutes": args.minutes,
        "threads": threads,
        "trials": trials,
        "remeasured": summary["remeasured"],
        "search_estimate_ms": search.tuning_summary["estimated_latency_s"] * 1e3,
        "closing_estimate_ms": summary["estimated_latency_s"] * 1e3,
        "median_ms": medians,
        "closing_to_search": medians["after the closing round"] / medians["search's records"],
        "to_tflite": {name: m / medians["tflite"] for name, m in medians.items()},
    }
    print(f"{args.model} {options}, {trials} trials in {args.minutes:g} min, {threads} threads")
    print(
        f"  estimate: search {result['search_estimate_ms']:.3f} ms, after the round "
        f"{result['closing_estimate_ms']:.3f} ms ({summary['remeasured']} records "
        f"timed again)"
    )
    for name, median in medians.items():
        print(f"  {name:<24} median {median:.3f} ms  x TFLite {result['to_tflite'][name]:.2f}")
    print(f"  after the round / search's records: {result['closing_to_search']:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        print(f"results: {args.out}")
    if args.keep:
        print(f"stores: {scratch / 'search'} and {scratch / 'closing'}, run {run_id}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
