"""Does the tuning's timing predict the model? Its kernels timed again beside the model.

The estimate a tuning run reports is the sum over tasks of (calls per model run) x (the
task's best latency), each candidate timed alone by the profile stage with the caches set
as its cache mode says (:mod:`simpletvm.tuning.timing`). On a shared host the machine's
speed moves between the search and a later measurement, so the recorded estimate and the
measured model can differ by the host's drift alone. This script takes the drift out:
in alternating rounds it times the run's saved module and each task's best record timed
again exactly as the profile stage timed it (the same evaluator, in this process), and
prints model / estimate per round. ``--modes`` times the kernels in other cache modes too;
``--model-bytes`` times the ``model`` mode once per amount streamed (default: the model's
footprint, as the tuning job counts it), all in the same rounds.

    python bench/estimate_fidelity.py --run-id RUN_ID --store DIR [--rounds 3]
                                      [--modes model,memory,l3] [--model-bytes N,N]
                                      [--out bench/results/x.json]

RUN_ID is a tuned run of a built-in model whose module was saved (``bench/peers.py`` and
the quickstart print them); its records must be in DIR's record database. Run it on a
quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from kernels_in_situ import load_saved, rebuilt, whole_model_ms


def best_kernels(stvm, database, built, scratch: str) -> list[tuple]:
    """Per tuned task of the built module: (calls per run, its best latency in the
    records, that record compiled alone and loaded as the profile stage loads a
    candidate, random arguments, the task's name)."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from simpletvm.compiler.lowering import extract_tasks
    from simpletvm.tuning.builder import compile_candidate
    from simpletvm.tuning.database import best_latency_s
    from simpletvm.tuning.timing import alloc_arguments

    target = stvm.target.tvm_target()
    kernels = []
    for task in extract_tasks(built, stvm.target):
        with target:
            scheduled = database.query_ir_module(task.dispatched[0], target, "main")
        if scheduled is None:
            continue  # a task with no record keeps TVM's default schedule: not estimated
        library = os.path.join(scratch, f"{len(kernels)}.so")
        compile_candidate(scheduled, target).export_library(library)
        arguments = alloc_arguments(  # as the runner allocates a candidate's
            tvm.cpu(), [info.as_json() for info in ArgInfo.from_entry_func(scheduled)], 1
        )[0]
        kernels.append(
            (
                int(task.weight),
                best_latency_s(database, task),
                tvm.runtime.load_module(library),
                arguments,
                task.task_name,
            )
        )
    return kernels


def tuning_cache_mode(saved) -> str:
    """The cache mode the saved run's tuning timed its candidates in (runs of earlier
    versions did not record it: this version's choice for them)."""
    from simpletvm.tuning.timing import resolve_cache_mode

    return (saved.context.tuning or {}).get("cache_mode") or resolve_cache_mode(
        "auto", device_type="cpu", local=True
    )


def kernel_ms(kernels: list[tuple], mode: str, model_bytes: int) -> dict[str, float]:
    """Per task name, calls x median latency in ms, each best record timed by the profile
    stage's evaluator for ``mode`` (``model_bytes``: what the "model" mode streams)."""
    import tvm

    from simpletvm.tuning.options import TuningOptions
    from simpletvm.tuning.timing import evaluator_config, run_evaluator

    evaluate = run_evaluator(mode, model_bytes)
    config = evaluator_config(TuningOptions(repeat=10, cache_flush=mode), mode)
    device = tvm.cpu()
    return {
        name: weight * statistics.median(evaluate(module, device, config, [arguments])) * 1e3
        for weight, _, module, arguments, name in kernels
    }


def estimate_ms(kernels: list[tuple], mode: str, model_bytes: int) -> float:
    """The sum over tasks of :func:`kernel_ms`."""
    return sum(kernel_ms(kernels, mode, model_bytes).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--modes", default=None, help="cache modes to time the kernels in (default: the run's)"
    )
    parser.add_argument(
        "--model-bytes",
        default=None,
        help="amounts the model mode streams, comma-separated (default: the model's footprint)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/estimate_fidelity.json"))
    args = parser.parse_args()
    try:
        requested = [int(n) for n in args.model_bytes.split(",")] if args.model_bytes else None
    except ValueError:
        parser.error(f"--model-bytes: {args.model_bytes!r} is not a list of integers")

    from simpletvm.tuning.timing import CACHE_MODES, model_footprint_bytes

    saved = load_saved(args.store, args.run_id)
    stvm, database, built = rebuilt(saved, args.store, args.run_id)
    run_mode = tuning_cache_mode(saved)
    model_bytes = model_footprint_bytes(stvm.conv_forms.default)  # as the tuning job counts
    modes = args.modes.split(",") if args.modes else [run_mode]
    choices = [mode for mode in CACHE_MODES if mode != "auto"]
    unknown = [mode for mode in modes if mode not in choices]
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
    amounts = requested or [model_bytes]
    # each timing: (label, mode, bytes the model mode streams)
    timings = [
        (f"model@{n}" if len(amounts) > 1 else mode, mode, n)
        for mode in modes
        for n in (amounts if mode == "model" else [model_bytes])
    ]
    scratch = tempfile.TemporaryDirectory(prefix="estimate-fidelity-")
    kernels = best_kernels(stvm, database, built, scratch.name)
    recorded = sum(weight * best_s * 1e3 for weight, best_s, *_ in kernels)
    print(
        f"run {args.run_id}: {len(kernels)} tuned tasks, its cache mode '{run_mode}'; "
        f"recorded estimate {recorded:.4f} ms; one model run keeps "
        f"{model_bytes / 2**20:.1f} MB"
    )
    rounds = []
    for index in range(args.rounds):
        before = whole_model_ms(saved, 100)
        estimates = {label: estimate_ms(kernels, mode, n) for label, mode, n in timings}
        model = (before + whole_model_ms(saved, 100)) / 2
        rounds.append({"model_ms": model, "estimate_ms": estimates})
        print(
            f"round {index + 1}: model {model:.4f} ms; "
            + ", ".join(
                f"estimate in '{mode}' {ms:.4f} ms (model / estimate {model / ms:.2f})"
                for mode, ms in estimates.items()
            ),
            flush=True,
        )
    model = statistics.median(r["model_ms"] for r in rounds)
    summary = {
        label: statistics.median(r["model_ms"] / r["estimate_ms"][label] for r in rounds)
        for label, _, _ in timings
    }
    print(
        f"median model {model:.4f} ms = {model / recorded:.2f}x the recorded estimate; "
        "beside its kernels timed again: "
        + ", ".join(f"'{mode}' {ratio:.2f}x" for mode, ratio in summary.items())
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "run_id": args.run_id,
                "run_mode": run_mode,
                "recorded_estimate_ms": recorded,
                "rounds": rounds,
                "model_to_estimate": summary,
                "model_to_recorded_estimate": model / recorded,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
