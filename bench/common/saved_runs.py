"""A tuned run saved in a store, taken apart again: its module as SimpleTVM loads it, its
model lowered again with its records (each contested layer in the form it chose, so the
kernel names are the saved module's), and each task's best record compiled alone and
timed again as the tuning's profile stage timed it; and a store's records copied while
a tuning writes them, or carried into another store."""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
from pathlib import Path

import numpy as np


def load_saved(store: str, run_id: str):
    """The run's saved module (compiled entry), as SimpleTVM loads it."""
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.console import native_output_to

    with native_output_to(os.devnull):  # a line per kernel as the module loads
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
    """The model's first input, seeded random values, on the CPU."""
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


def kernels_alone_ms(kernels: list[tuple], mode: str, model_bytes: int) -> dict[str, float]:
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
    """The sum over tasks of :func:`kernels_alone_ms`."""
    return sum(kernels_alone_ms(kernels, mode, model_bytes).values())


def copy_records(source: Path, destination: Path) -> None:
    """A consistent copy of a records database while the tuning writes to it."""
    with sqlite3.connect(source) as reading, sqlite3.connect(destination) as writing:
        reading.backup(writing)


def carry_in_model_choices(earlier: Path, later: Path) -> None:
    """The rounds inside the model that copy ``earlier`` holds (each kernel's choice and
    each contested layer's form), put in copy ``later`` (a copy of the same store taken
    later: the same workload ids)."""
    with sqlite3.connect(later) as connection:
        connection.execute("ATTACH DATABASE ? AS earlier", (str(earlier),))
        for table in ("in_model_choices", "in_model_forms"):
            connection.execute(f"INSERT OR REPLACE INTO {table} SELECT * FROM earlier.{table}")


def warm_store(sources: list[Path], store) -> int:
    """Every record of ``sources`` (stores or records files) added to ``store`` (a
    RunStore) under its own run id, and the sources' cost models merged into the
    store's; returns how many records."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    from simpletvm.tuning.cost_model import load_store_cost_model, save_store_cost_model
    from simpletvm.tuning.record_files import open_records
    from simpletvm.tuning.records import RecordStore

    into = RecordStore(store.records_path)
    added = 0
    for source in sources:
        path = open_records(source).path
        with sqlite3.connect(path) as connection:
            rows = connection.execute(
                "SELECT w.key, w.json, r.run_id, r.json FROM records r "
                "JOIN workloads w ON w.id = r.workload_id ORDER BY w.key, r.run_id"
            ).fetchall()
        groups: dict[tuple[str, str | None], tuple[str, list]] = {}
        for key, workload, run_id, record in rows:
            groups.setdefault((key, run_id), (workload, []))[1].append(json.loads(record))
        for (key, run_id), (workload, records) in groups.items():
            added += into.add(key, json.loads(workload), records, run_id)
        for model_file in sorted(Path(source).glob("cost_models/*.tar")):
            model = XGBModel()
            if load_store_cost_model(model, model_file):
                save_store_cost_model(model, store.root / "cost_models" / model_file.name)
    into.close()
    return added
