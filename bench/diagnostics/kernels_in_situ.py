"""Where a tuned model's measured latency departs from its tuning estimate, kernel by kernel.

The estimate is the sum over tasks of (calls per model run) x (the task's best measured
latency), each candidate timed alone in the tuning's cache mode. This script profiles the
module in place and puts each task's estimate beside its time in situ, plus what the
model spends outside the tuned kernels (other calls, the VM itself). Run it on a quiet
machine.

    python bench/kernels_in_situ.py --run-id RUN_ID --store DIR [--runs 20]
                                    [--launches [--rounds 3] | --by-difference]
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

RUN_ID is a tuned run of a built-in model whose module was saved (``bench/peers.py`` and
the quickstart print them); its records must be in DIR's record database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np


def load_saved(store: str, run_id: str):
    """The run's saved module (compiled entry), as SimpleTVM loads it."""
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm._process.native_output import redirected

    with redirected(os.devnull, fds=(2,)):  # a line per kernel as the module loads
        # every core, as the kernels were tuned and are timed here
        return SimpleTVM(BenchmarkingContext("cpu", store=store, num_threads=os.cpu_count())).load(
            run_id
        )


def rebuilt(saved, store: str, run_id: str):
    """The run's model lowered again, its record database, and the module its build
    compiled (each contested layer in the form it chose, so kernel names are those of the
    saved module)."""
    from functools import partial

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.models.zoo import builtin_recipe
    from simpletvm.tuning.database import RecordDatabase, best_latency_s
    from simpletvm.tuning.record_files import open_records

    recipe = builtin_recipe(saved.context.model)
    if recipe is None:
        raise SystemExit(f"run {run_id} is not of a built-in model: nothing to lower again")
    name, options = recipe
    stvm = SimpleTVM(
        BenchmarkingContext("cpu", store=store, num_threads=os.cpu_count())
    ).from_model(name, **options)
    database = RecordDatabase(
        open_records(store), stvm.target.tvm_target(), scope="run", run_id=run_id
    )
    built, _ = stvm.conv_forms.choose(partial(best_latency_s, database))
    return stvm, database, built


def task_estimates(stvm, database, built) -> list[dict]:
    """Per task of the built module: name, calls per run, best latency in the records."""
    from simpletvm.compiler.lowering import extract_tasks
    from simpletvm.tuning.database import best_latency_s

    tasks = []
    for task in extract_tasks(built, stvm.target):
        best = best_latency_s(database, task)
        tasks.append(
            {
                "task": task.task_name,
                "weight": int(task.weight),
                "best_ms": best * 1e3 if best is not None else None,
            }
        )
    return tasks


def model_input(stvm):
    import tvm

    spec = stvm.model.inputs[0]
    return tvm.runtime.tensor(
        np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype), tvm.cpu()
    )


def whole_model_ms(saved, runs: int) -> float:
    """The median ms of a run of the saved module (compiled entry, no instrument)."""
    main, data = saved.vm["main"], model_input(saved)
    return median_ms(lambda: main(data), runs, warmup_calls=5, warmup_s=0.2)


def median_ms(call, calls: int, warmup_calls: int, warmup_s: float) -> float:
    """The median ms of ``calls`` timed calls, after untimed ones (at least
    ``warmup_calls`` and ``warmup_s``)."""
    from simpletvm.runtime.evaluation import warm_up

    warm_up(call, warmup_calls, warmup_s)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


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
    import tempfile

    from estimate_fidelity import best_kernels, kernel_ms, tuning_cache_mode

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
            for name, ms in kernel_ms(kernels, mode, model_bytes).items():
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
    import tempfile

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
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --launches")
    parser.add_argument("--out", type=Path, default=Path("bench/results/kernels_in_situ.json"))
    args = parser.parse_args()
    if args.launches:
        from simpletvm.runtime.fork_join import POOL_VARIABLE

        os.environ[POOL_VARIABLE] = "timed"  # before the pool loads with the module

    saved = load_saved(args.store, args.run_id)
    stvm, database, built = rebuilt(saved, args.store, args.run_id)
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    method_name = (
        "by difference" if args.by_difference else "launches" if args.launches else "instrument"
    )
    args.out.write_text(
        json.dumps(
            {
                "run_id": args.run_id,
                "method": method_name,
                "tasks": rows,
                "other_calls_ms": others,
                "estimate_ms": estimate,
                "alone_ms": sum(alone.values()) if alone else None,
                "kernels_in_situ_ms": kernels,
                "whole_ms": whole_ms,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
