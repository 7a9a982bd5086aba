"""What checking every schedule costs a build: a model built untuned without the check,
with it on an empty verdict book (every default checked against TVM's naive schedule),
and with it again (every verdict read from the book), in alternating rounds.

Each round builds the model three ways in this order: unchecked, first checked (a fresh
store, so nothing is known), second checked (the store the first filled). The first
round's unchecked build also pays the process's one-time imports, so rounds start after
one warm-up build. The report: per model, each way's median build seconds, the ratios to
the unchecked build, and how many kernels the check found wrong.

    python bench/check_cost.py [--models quickstart,resnet18] [--rounds 2]
                               [--out bench/results/check_cost.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common
from bench.common.models import BUILTIN, unknown_models
from simpletvm.hostinfo import host_description

WAYS = ("unchecked", "first checked", "second checked")


def build_seconds(stvm, check: bool) -> tuple[float, int]:
    """One untuned build's wall seconds, and how many wrong schedules it warned of."""
    import simpletvm.compiler.build as build

    original = build.compile_fused

    def compile_fused(*args, **kwargs):
        return original(*args, **{**kwargs, "check": check})

    build.compile_fused = compile_fused
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            stvm.build(records=None)
            seconds = time.perf_counter() - start
    finally:
        build.compile_fused = original
    return seconds, sum("computes a different answer" in str(w.message) for w in caught)


def measure(model: str, rounds: int, scratch: Path) -> dict:
    from simpletvm import BenchmarkingContext, SimpleTVM

    name, options = BUILTIN[model]

    def session(store: Path):
        return SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(name, **options)

    warm = session(scratch / f"{model}-warm")
    build_seconds(warm, check=False)  # imports, tensor intrinsics: once a process
    samples = {way: [] for way in WAYS}
    wrong = 0
    for index in range(rounds):
        fresh = session(scratch / f"{model}-{index}")
        samples["unchecked"].append(build_seconds(fresh, check=False)[0])
        seconds, found = build_seconds(fresh, check=True)
        samples["first checked"].append(seconds)
        samples["second checked"].append(build_seconds(fresh, check=True)[0])
        wrong = max(wrong, found)
    medians = {way: float(np.median(s)) for way, s in samples.items()}
    return {
        "model": model,
        "samples_s": samples,
        "median_s": medians,
        "ratio_to_unchecked": {way: m / medians["unchecked"] for way, m in medians.items()},
        "wrong_schedules": wrong,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="quickstart,resnet18")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results/check_cost.json"))
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    error = unknown_models(models)
    if error:
        parser.error(error)
    results = {"host": host_description(), "models": []}
    with tempfile.TemporaryDirectory(prefix="check-cost-") as scratch:
        for model in models:
            result = measure(model, args.rounds, Path(scratch))
            results["models"].append(result)
            ratios = result["ratio_to_unchecked"]
            print(
                f"{model}: unchecked {result['median_s']['unchecked']:.1f} s, "
                f"first checked {ratios['first checked']:.2f}x, "
                f"second checked {ratios['second checked']:.2f}x, "
                f"wrong schedules {result['wrong_schedules']}",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
