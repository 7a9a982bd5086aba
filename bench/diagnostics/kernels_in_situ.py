"""Where a tuned model's measured latency departs from its tuning estimate, kernel by kernel,
and whether the estimate predicts the model at all once the host's drift is taken out.

The estimate is the sum over tasks of (calls per model run) x (the task's best measured
latency), each candidate timed alone in the tuning's cache mode
(:mod:`simpletvm.tuning.timing`). By default this script profiles the module in place and
puts each task's estimate beside its time in situ, plus what the model spends outside the
tuned kernels (other calls, the VM itself). Run it on a quiet machine.

    python bench/diagnostics/kernels_in_situ.py --run-id RUN_ID --store DIR [--runs 20]
        [--launches [--rounds 3] | --by-difference
         | --fidelity [--rounds 3] [--modes model,memory,l3] [--model-bytes N,N]]
        [--out bench/results/kernels_in_situ.json]

By default a Relax VM instrument times every kernel call of a bytecode build of the
model; it calls into Python around each kernel, which costs microseconds per call and
slows the kernels after it. ``--launches`` times the saved module as it runs: the pool
(:mod:`simpletvm.runtime.fork_join`, built to record) notes when each kernel's parallel
loops start and end, two clock reads a loop; in the same alternating rounds each task's
best record is timed alone again as the profile stage timed it, so a kernel's in situ /
alone ratio is free of the host's drift. What no loop covers (calls, the VM, serial
code) is "between the loops". ``--by-difference`` times each task without an instrument:
the whole model against the same build with that task's kernels emptied (a body that
does nothing, the same signature), in alternating rounds; the difference is what the task
costs inside the model, what its absence changes for its neighbours included. The build
with every kernel emptied gives what the model spends outside them (calls, the VM,
Python).

``--fidelity`` asks the whole-model question: on a shared host the machine's speed moves
between the search and a later measurement, so the recorded estimate and the measured
model can differ by the host's drift alone. In alternating rounds it times the saved
module and each task's best record again exactly as the profile stage timed it (the same
evaluator, in this process), and prints model / estimate per round. ``--modes`` times the
kernels in other cache modes too; ``--model-bytes`` times the ``model`` mode once per
amount streamed (default: the model's footprint, as the tuning job counts it).

RUN_ID is a tuned run of a built-in model whose module was saved (``bench/peers.py`` and
the quickstart print them); its records must be in DIR's record database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common

from bench.common.saved_runs import (
    best_kernels,
    estimate_ms,
    kernels_alone_ms,
    load_saved,
    median_ms,
    model_input,
    rebuilt,
    task_estimates,
    tuning_cache_mode,
    whole_model_ms,
)


def profile_in_situ(stvm, database, built, runs: int) -> dict[str, float]:
    """Per kernel name, its total ms per model run inside the model, timed around each
    VM call by an instrument. The instrument sees only bytecode's calls, so this is the
    same build with a bytecode entry (the kernels are the same code)."""
    import tvm
    from tvm import relax

    from simpletvm.compiler.build import compile_fused

    vm = relax.VirtualMachine(compile_fused(built, stvm.target, database, bytecode=True), tvm.cpu())
    data = model_input(stvm)
    started: dict[str, float] = {}
    per_run: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *args):
        now = time.perf_counter()
        if before_run:
            started[symbol] = now
        else:
            per_run[symbol] = per_run.get(symbol, 0.0) + (now - started.pop(symbol)) * 1e3
        return 0  # go on as usual

    vm.set_instrument(instrument)
    totals: dict[str, list[float]] = {}
    for _ in range(runs + 1):
        per_run.clear()
        vm["main"](data)
        for name, ms in per_run.items():
            totals.setdefault(name, []).append(ms)
    return {name: statistics.median(values[1:]) for name, values in totals.items()}


def profile_by_launches(saved, runs: int) -> dict[str, float]:
    """Per kernel name, its median ms per model run inside the saved module, from the
    pool's own record of every parallel loop it launched
    (:func:`simpletvm.runtime.in_situ.kernel_ms`); ``"between the loops"``: the rest of
    the run (calls, the VM, serial code, waiting); ``"whole"``: the run. Needs
    ``SIMPLETVM_FORK_JOIN_POOL=timed`` set before the module loads."""
    from simpletvm.runtime.in_situ import kernel_ms

    spent = kernel_ms(saved.vm, saved.target.device(), [model_input(saved)], runs)
    return {name: statistics.median(values) for name, values in spent.items()}


def launches_beside_kernels(saved, stvm, database, built, runs: int, rounds: int):
    """In alternating rounds, the model's kernels timed in place (:func:`profile_by_launches`)
    and each task's best record timed again alone, as the profile stage timed it during
    the tuning (its cache mode): ``(in situ, alone)``, medians per name."""
    from simpletvm.tuning.timing import model_footprint_bytes

    mode = tuning_cache_mode(saved)
    model_bytes = model_footprint_bytes(stvm.conv_forms.default)  # as the tuning job counts
    in_situ: dict[str, list[float]] = {}
    alone: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="kernels-in-situ-") as scratch:
        kernels = best_kernels(stvm, database, built, scratch)
        for _ in range(rounds):
            for name, ms in profile_by_launches(saved, runs).items():
                in_situ.setdefault(name, []).append(ms)
            for name, ms in kernels_alone_ms(kernels, mode, model_bytes).items():
                alone.setdefault(name, []).append(ms)
    return (
        {name: statistics.median(values) for name, values in in_situ.items()},
        {name: statistics.median(values) for name, values in alone.items()},
    )


def emptied(mod, names: set[str]):
    """``mod`` with the kernels called ``names`` doing nothing (same signatures)."""
    import tvm

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for var, function in mod.functions.items():
        if var.name_hint in names:
            out[var] = function.with_body(tvm.tirx.Evaluate(0))
    return out


def cost_by_difference(stvm, database, built, rounds: int, calls: int = 400) -> dict[str, float]:
    """Per tuned kernel name (and ``"outside the kernels"``), the ms a model run loses
    when that kernel does nothing, medians over ``rounds`` alternating rounds."""
    import tvm
    from tvm import relax

    from simpletvm.compiler.build import apply_records, compile_fused
    from simpletvm.runtime.fork_join import use_for_loaded_kernels

    applied = apply_records(built, stvm.target, database)
    kernels = {
        var.name_hint
        for var, function in applied.functions.items()
        if isinstance(function, tvm.tirx.PrimFunc)
    }
    variants = {"whole": applied, "outside the kernels": emptied(applied, kernels)}
    variants.update({name: emptied(applied, {name}) for name in sorted(kernels)})
    data = model_input(stvm)
    scratch = tempfile.TemporaryDirectory(prefix="kernels-by-difference-")
    calls_of = {}
    for index, (name, mod) in enumerate(variants.items()):
        library = f"{scratch.name}/{index}.so"
        compile_fused(mod, stvm.target).export_library(library)
        main = relax.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())["main"]
        calls_of[name] = lambda main=main: main(data)
    use_for_loaded_kernels(os.cpu_count())  # every core, as the kernels were tuned
    medians: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, call in calls_of.items():
            medians[name].append(median_ms(call, calls, warmup_calls=20, warmup_s=0.05))
    whole = statistics.median(medians.pop("whole"))
    outside = statistics.median(medians.pop("outside the kernels"))
    return {
        "whole": whole,
        "outside the kernels": outside,
        **{name: whole - statistics.median(ms) for name, ms in medians.items()},
    }


def kernel_table(args, saved, stvm, database, built) -> dict:
    """Each task's estimate beside its time in situ (by the method ``args`` chose),
    printed, and what the model spends outside the tuned kernels."""
    tasks = task_estimates(stvm, database, built)
    alone: dict[str, float] = {}
    if args.by_difference:
        in_situ = cost_by_difference(stvm, database, built, args.runs)
        whole_ms = in_situ.pop("whole")
    elif args.launches:
        in_situ, alone = launches_beside_kernels(
            saved, stvm, database, built, args.runs, args.rounds
        )
        whole_ms = in_situ.pop("whole")
    else:
        in_situ = profile_in_situ(stvm, database, built, args.runs)
        whole_ms = whole_model_ms(saved, args.runs)
    rows = []
    for task in tasks:
        estimate = task["best_ms"] * task["weight"] if task["best_ms"] is not None else None
        # a kernel whose weights a tuned schedule reads in its own layout is called
        # "<task>_prepacked" (the repacking runs once, at build time)
        measured = in_situ.pop(task["task"], None) or in_situ.pop(f"{task['task']}_prepacked", None)
        rows.append(
            {
                **task,
                "estimate_ms": estimate,
                "alone_ms": alone.get(task["task"]),
                "in_situ_ms": measured,
                "ratio": measured / estimate if measured and estimate else None,
            }
        )
    rows.sort(key=lambda row: -(row["in_situ_ms"] or 0))
    others = dict(sorted(in_situ.items(), key=lambda item: -item[1]))
    estimate = sum(row["estimate_ms"] or 0 for row in rows)
    kernels = sum(row["in_situ_ms"] or 0 for row in rows)
    print(
        f"{'task':<48} {'calls':>5} {'estimate ms':>11} {'alone ms':>9} {'in situ ms':>10} "
        f"{'ratio':>6} {'/alone':>6}"
    )
    for row in rows:
        ratio = f"{row['ratio']:.2f}" if row["ratio"] else "-"
        alone_ms = row["alone_ms"]
        to_alone = f"{row['in_situ_ms'] / alone_ms:.2f}" if alone_ms and row["in_situ_ms"] else "-"
        print(
            f"{row['task'][:48]:<48} {row['weight']:>5} {row['estimate_ms'] or 0:>11.4f} "
            f"{alone_ms or 0:>9.4f} {row['in_situ_ms'] or 0:>10.4f} {ratio:>6} {to_alone:>6}"
        )
    print(
        f"\ntuned kernels: estimate {estimate:.3f} ms, in situ {kernels:.3f} ms "
        f"({kernels / estimate:.2f}x)"
        + (
            f"; timed alone again {sum(alone.values()):.3f} ms "
            f"(in situ {kernels / sum(alone.values()):.2f}x)"
            if alone
            else ""
        )
    )
    print(
        f"other calls in situ: {sum(others.values()):.4f} ms "
        + ", ".join(f"{name} {ms:.4f}" for name, ms in list(others.items())[:6])
    )
    print(
        f"whole model{'' if args.launches else ' without the profiler'}: {whole_ms:.3f} ms "
        f"({whole_ms / estimate:.2f}x the estimate)"
    )
    method_name = (
        "by difference" if args.by_difference else "launches" if args.launches else "instrument"
    )
    return {
        "run_id": args.run_id,
        "method": method_name,
        "tasks": rows,
        "other_calls_ms": others,
        "estimate_ms": estimate,
        "alone_ms": sum(alone.values()) if alone else None,
        "kernels_in_situ_ms": kernels,
        "whole_ms": whole_ms,
    }


def fidelity(args, parser, requested: list[int] | None, saved, stvm, database, built) -> dict:
    """In alternating rounds, the saved module's median against each task's best record
    timed again as the profile stage timed it (in the run's cache mode, or each of
    ``--modes``; the "model" mode once per ``--model-bytes``): model / estimate per round,
    the host's drift taken out."""
    from simpletvm.tuning.timing import CACHE_MODES, model_footprint_bytes

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
    scratch = tempfile.TemporaryDirectory(prefix="kernels-fidelity-")
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
    return {
        "run_id": args.run_id,
        "run_mode": run_mode,
        "recorded_estimate_ms": recorded,
        "rounds": rounds,
        "model_to_estimate": summary,
        "model_to_recorded_estimate": model / recorded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--runs", type=int, default=20)
    method = parser.add_mutually_exclusive_group()
    method.add_argument(
        "--by-difference",
        action="store_true",
        help="time each task by emptying its kernels, not by an instrument",
    )
    method.add_argument(
        "--launches",
        action="store_true",
        help="time each kernel by the pool's record of its parallel loops, beside its best "
        "record timed alone, in alternating rounds",
    )
    method.add_argument(
        "--fidelity",
        action="store_true",
        help="the whole model against its kernels timed again as the tuning timed them, "
        "in alternating rounds",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --launches or --fidelity")
    parser.add_argument(
        "--modes",
        default=None,
        help="--fidelity: cache modes to time the kernels in (default: the run's)",
    )
    parser.add_argument(
        "--model-bytes",
        default=None,
        help="--fidelity: amounts the model mode streams, comma-separated (default: the model's footprint)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/kernels_in_situ.json"))
    args = parser.parse_args()
    try:
        requested = [int(n) for n in args.model_bytes.split(",")] if args.model_bytes else None
    except ValueError:
        parser.error(f"--model-bytes: {args.model_bytes!r} is not a list of integers")
    if args.launches:
        from simpletvm.runtime.fork_join import POOL_VARIABLE

        os.environ[POOL_VARIABLE] = "timed"  # before the pool loads with the module

    saved = load_saved(args.store, args.run_id)
    stvm, database, built = rebuilt(saved, args.store, args.run_id)
    if args.fidelity:
        result = fidelity(args, parser, requested, saved, stvm, database, built)
    else:
        result = kernel_table(args, saved, stvm, database, built)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
