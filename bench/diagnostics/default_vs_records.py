"""Each task's default schedule against its best tuned record, kernel by kernel.

Where the default schedules (:mod:`simpletvm.compiler.default_schedules`) still lose to
what a search finds: every task of a built-in model, its default schedule and the best
record of a tuned run compiled alone, as the profile stage compiles a candidate, and
timed in alternating rounds (hot: the arguments stay in the caches), so the host's drift
hits both alike. The table is sorted by the time a model run loses (calls x the
difference); the last line gives the sums.

    python bench/diagnostics/default_vs_records.py --store DIR --run-id RUN [--model mobilenetv2]
                                       [--rounds 3] [--out bench/results/x.json]

RUN is a tuned run of the model in DIR's record database (``bench/time_to_peers.py
--keep-stores`` keeps such stores). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from functools import partial
from pathlib import Path


def compiled_kernels(model: str, store: str, run_id: str) -> list[dict]:
    """Per task: name, calls per model run, and its default schedule and best record
    (when it has one) compiled and loaded, with arguments to call them."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.compiler.default_schedules import default_schedule
    from simpletvm.compiler.lowering import extract_tasks
    from simpletvm.tuning.builder import compile_candidate
    from simpletvm.tuning.database import RecordDatabase, best_latency_s
    from simpletvm.tuning.record_files import open_records
    from simpletvm.tuning.timing import alloc_arguments

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store, num_threads=os.cpu_count()))
    stvm.from_model(model)
    target = stvm.target.tvm_target()
    database = RecordDatabase(open_records(store), target, scope="run", run_id=run_id)
    built, _ = stvm.conv_forms.choose(partial(best_latency_s, database))
    scratch = tempfile.mkdtemp(prefix="default-vs-records-")
    kernels = []
    for index, task in enumerate(extract_tasks(built, stvm.target)):
        with target:
            record = database.query_ir_module(task.dispatched[0], target, "main")
        schedules = {"default": default_schedule(task.dispatched[0], target).mod}
        if record is not None:
            schedules["record"] = record
        loaded = {}
        for kind, mod in schedules.items():
            library = os.path.join(scratch, f"{index}-{kind}.so")
            compile_candidate(mod, target).export_library(library)
            infos = ArgInfo.from_entry_func(mod, remove_preproc=True)
            arguments = alloc_arguments(tvm.cpu(), [i.as_json() for i in infos], 1)[0]
            loaded[kind] = (tvm.runtime.load_module(library), arguments)
        kernels.append({"task": task.task_name, "calls": int(task.weight), "loaded": loaded})
    return kernels


def timed(kernels: list[dict], rounds: int) -> list[dict]:
    """Each kernel's median microseconds a call, default and record taking turns."""
    import tvm

    device = tvm.cpu()
    samples = {(k["task"], kind): [] for k in kernels for kind in k["loaded"]}
    for _ in range(rounds):
        for kernel in kernels:
            for kind, (module, arguments) in kernel["loaded"].items():
                evaluate = module.time_evaluator(
                    module.entry_name, device, number=20, repeat=3, min_repeat_ms=0
                )
                samples[kernel["task"], kind].append(min(evaluate(*arguments).results) * 1e6)
    rows = []
    for kernel in kernels:
        row = {"task": kernel["task"], "calls": kernel["calls"]}
        for kind in ("default", "record"):
            values = samples.get((kernel["task"], kind))
            row[f"{kind}_us"] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="the tuned store's directory")
    parser.add_argument("--run-id", required=True, help="the tuned run whose records to take")
    parser.add_argument("--model", default="mobilenetv2", help="the built-in model it tuned")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    if not Path(args.store, "records.sqlite").exists():
        parser.error(f"{args.store} holds no record database (records.sqlite): give a store")
    rows = timed(compiled_kernels(args.model, args.store, args.run_id), args.rounds)
    if not any(row["record_us"] for row in rows):
        parser.error(f"run {args.run_id} has no record of {args.model}'s tasks in {args.store}")

    def lost_us(row: dict) -> float:
        return row["calls"] * (row["default_us"] - (row["record_us"] or row["default_us"]))

    print(f"{'task':45s} calls  default us  record us  default/record  lost us a run")
    for row in sorted(rows, key=lost_us, reverse=True):
        record = row["record_us"] or float("nan")
        print(
            f"{row['task']:45s} {row['calls']:5d} {row['default_us']:11.1f} {record:10.1f} "
            f"{row['default_us'] / record:15.2f} {lost_us(row):14.1f}"
        )
    default = sum(r["calls"] * r["default_us"] for r in rows)
    record = sum(r["calls"] * (r["record_us"] or r["default_us"]) for r in rows)
    print(f"sum a run: default {default:.1f} us, records {record:.1f} us, {default / record:.3f}x")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
