"""The quickstart's tuned module against TFLite (XNNPACK), in many rounds.

The quickstart compares its module with TFLite in 20 rounds of 50 calls, about a second;
the host's speed moves within minutes, and TFLite's figure once moved 1.7x between two
runs of the command. This script loads a saved run (the quickstart prints its run id), builds
TFLite's model from the same built-in Keras model (same options, same seeded weights),
checks that both compute the same output, then times SimpleTVM's module and TFLite, each
on every core and on one, in alternating rounds (each turn opening with untimed warm-up
calls), and reports the medians, the ratio of the faster SimpleTVM to the faster TFLite
(as the quickstart compares them) and in how many rounds SimpleTVM was the faster.

    python bench/quickstart_tflite.py --run-id RUN [--store DIR] [--rounds 40]
                                      [--calls 50] [--threads N]
                                      [--out bench/results/quickstart_tflite.json]

``--threads N`` runs SimpleTVM's module on N threads only (the host's speed of
core-to-core traffic changes within minutes here, and with it the faster count, which is
why both are timed by default).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", required=True, help="a saved quickstart run")
    parser.add_argument("--store", help="run store root (default: SimpleTVM's)")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=50, help="timed calls per round")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="SimpleTVM's threads (default: every core and one)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/quickstart_tflite.json"))
    args = parser.parse_args()

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.models.zoo import builtin_recipe, builtin_tflite
    from simpletvm.runtime.comparison import simpletvm_runners, tflite_runners, time_side_by_side
    from simpletvm.runtime.threads import runtime_threads

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=args.store, num_threads=args.threads)).load(
        args.run_id
    )
    recipe = builtin_recipe(stvm.context.model)
    if recipe is None:
        raise SystemExit(
            f"run {args.run_id} is not of a built-in model: nothing to rebuild TFLite's model from"
        )
    model, options = recipe
    threads = stvm.target.host_cores()  # TFLite on every core and on one, as the quickstart
    size = options["image_size"]
    example = np.random.default_rng(0).standard_normal((1, size, size, 3)).astype("float32")
    tflite = tflite_runners(builtin_tflite(model, stvm.store.zoo_dir, **options), example, threads)
    chosen = runtime_threads()
    with simpletvm_runners(stvm, example) as ours:
        runners = {
            **{_name("simpletvm", count, threads): run for count, run in ours.items()},
            **{_name("tflite", count, threads): run for count, run in tflite.items()},
        }
        difference = float(
            np.abs(runners[_name("simpletvm", max(ours), threads)]() - runners["tflite"]()).max()
        )
        if difference > 1e-4:
            raise SystemExit(
                f"the saved module and TFLite disagree (max |diff| "
                f"{difference:.3g}): is the run a quickstart of this model?"
            )
        samples = time_side_by_side(runners, args.rounds, args.calls, args.warmup)
    per_round = {
        name: np.median(np.reshape(s, (args.rounds, args.calls)), axis=1) * 1e3
        for name, s in samples.items()
    }
    medians = {name: float(np.median(s)) * 1e3 for name, s in samples.items()}
    ours_fastest, fastest = (
        min((name for name in runners if name.startswith(side)), key=medians.get)
        for side in ("simpletvm", "tflite")
    )
    ratios = per_round[ours_fastest] / per_round[fastest]
    result = {
        "run_id": args.run_id,
        "model": model,
        "options": options,
        "threads": threads,
        "simpletvm_threads_at_load": chosen,
        "simpletvm_fastest": ours_fastest,
        "tflite_fastest": fastest,
        "load_step": stvm.context.steps[-1],
        "rounds": args.rounds,
        "calls": args.calls,
        "max_abs_difference": difference,
        "median_ms": medians,
        "p90_ms": {name: float(np.percentile(s, 90)) * 1e3 for name, s in samples.items()},
        "ratio": medians[ours_fastest] / medians[fastest],
        "rounds_simpletvm_faster": int((ratios < 1).sum()),
        "round_ratio_quartiles": [float(q) for q in np.percentile(ratios, [25, 50, 75])],
    }
    print(
        f"{model} {options}, {threads} cores (SimpleTVM's load chose {chosen} "
        f"thread{'' if chosen == 1 else 's'}), {args.rounds} rounds x {args.calls} calls"
    )
    for name in runners:
        print(f"  {name:<12} median {medians[name]:.3f} ms, p90 {result['p90_ms'][name]:.3f} ms")
    quartiles = ", ".join(f"{q:.2f}" for q in result["round_ratio_quartiles"])
    print(
        f"  {ours_fastest} / {fastest} (the faster of each) {result['ratio']:.2f}; per round: "
        f"quartiles {quartiles}; "
        f"SimpleTVM faster in {result['rounds_simpletvm_faster']} of {args.rounds} rounds"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"results: {args.out}")


def _name(side: str, count: int, threads: int) -> str:
    """``side`` on every core, ``side-1`` on one."""
    return side if count == threads else f"{side}-{count}"


if __name__ == "__main__":
    main()
