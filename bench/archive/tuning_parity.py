"""Tuning quality and overhead: SimpleTVM's TuningJob against MetaSchedule's tune_relax.

One run, one machine, the same model, target, trial budget per task, batch size and
search parameters. MetaSchedule's stock LocalBuilder loses every candidate to build
timeouts on small hosts (see bench/archive/build_throughput.py), so tune_relax is given
SimpleTVM's PersistentBuilder. Then a second SimpleTVM job on the same model, with the
global database warm, gets a tenth of the first job's trials (transfer learning).
All tuned modules are timed side by side at the end, in alternating rounds.

    python bench/archive/tuning_parity.py [--trials 16] [--candidates-per-iteration 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenetv2")
    parser.add_argument("--alpha", type=float, default=0.35)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--trials", type=int, default=16, help="per task")
    parser.add_argument("--candidates-per-iteration", type=int, default=16)
    parser.add_argument("--population", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds per module")
    parser.add_argument("--repeat", type=int, default=40, help="samples per round")
    args = parser.parse_args()

    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.compiler.build import compile_fused
    from simpletvm.runtime.evaluation import random_inputs
    from simpletvm.tuning.builder import PersistentBuilder

    store = tempfile.mkdtemp(prefix="simpletvm-parity-")
    options = {"alpha": args.alpha, "image_size": args.image_size}
    search = {"population": args.population, "genetic_iterations": 3, "seed": 0}

    def session() -> SimpleTVM:
        return SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(args.model, **options)

    modules: dict[str, object] = {}
    rows: dict[str, dict] = {}

    untuned = session().build(records=None)
    modules["untuned"] = untuned.vm
    rows["untuned"] = {"trials": 0, "tuning_s": 0.0}

    ours = session()
    start = time.perf_counter()
    ours.autotune(
        trials=args.trials,
        candidates_per_iteration=args.candidates_per_iteration,
        transfer_learning=False,
        **search,
    )
    ours_s = time.perf_counter() - start
    ours.build(records="run")
    modules["SimpleTVM TuningJob"] = ours.vm
    stage_s = sum(s["duration_s"] for s in ours.context.stages)
    autotune_s = ours.context.step_durations()["autotune"]
    rows["SimpleTVM TuningJob"] = {
        "trials": ours.tuning_summary["trials"],
        "tuning_s": ours_s,
        "overhead": 1 - stage_s / autotune_s,
    }
    num_tasks = ours.tuning_summary["num_tasks"]

    target = ours.target
    work_dir = os.path.join(store, "tune_relax")
    builder = PersistentBuilder(target.kind, max_workers=os.cpu_count())
    start = time.perf_counter()
    database = ms.relax_integration.tune_relax(
        ours.fused_module,
        {},
        target.tvm_target(),
        work_dir,
        max_trials_global=args.trials * num_tasks,
        max_trials_per_task=args.trials,
        num_trials_per_iter=args.candidates_per_iteration,
        builder=builder,
        runner=ms.runner.LocalRunner(
            evaluator_config=ms.runner.EvaluatorConfig(
                number=3, repeat=1, min_repeat_ms=40, enable_cpu_cache_flush=False
            )
        ),
        strategy=ms.search_strategy.EvolutionarySearch(
            population_size=args.population, genetic_num_iters=3
        ),
        seed=0,
    )
    stock_s = time.perf_counter() - start
    builder.close()
    executable = compile_fused(ours.fused_module, target, database)
    modules["MetaSchedule tune_relax"] = relax.VirtualMachine(executable, target.device())
    rows["MetaSchedule tune_relax"] = {
        "trials": len(database.get_all_tuning_records()),
        "tuning_s": stock_s,
    }

    warm_trials = max(1, args.trials // 10)
    warm = session()
    start = time.perf_counter()
    warm.autotune(
        trials=warm_trials,
        candidates_per_iteration=args.candidates_per_iteration,
        transfer_learning=True,
        **search,
    )
    warm_s = time.perf_counter() - start
    warm.build(records="global")
    modules["SimpleTVM, global database warm"] = warm.vm
    rows["SimpleTVM, global database warm"] = {
        "trials": warm.tuning_summary["trials"],
        "tuning_s": warm_s,
    }

    device = target.device()
    inputs = [tvm.runtime.tensor(a, device) for a in random_inputs(ours.model.inputs)]
    samples: dict[str, list[float]] = {name: [] for name in modules}
    for _ in range(args.rounds):
        for name, vm in modules.items():
            vm.set_input("main", *inputs)
            timer = vm.time_evaluator("invoke_stateful", device, number=1, repeat=args.repeat)
            samples[name].extend(timer("main").results)
    median = {name: float(np.median(values)) * 1e3 for name, values in samples.items()}

    reference = median["MetaSchedule tune_relax"]
    print(
        f"\n{args.model} (alpha {args.alpha}, {args.image_size}x{args.image_size}), "
        f"{num_tasks} tasks, {args.trials} trials/task, batch {args.candidates_per_iteration}, "
        f"population {args.population}, {os.cpu_count()} cores"
    )
    print("\n| tuner | trials | tuning s | median ms | / tune_relax | overhead |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        overhead = f"{row['overhead'] * 100:.1f}%" if "overhead" in row else ""
        print(
            f"| {name} | {row['trials']} | {row['tuning_s']:.0f} | {median[name]:.3f} | "
            f"{median[name] / reference:.3f} | {overhead} |"
        )
    print(
        f"\nTuningJob latency / tune_relax latency: "
        f"{median['SimpleTVM TuningJob'] / reference:.3f} (target <= 1.05)"
    )
    print(
        f"TuningJob overhead outside its stages: {rows['SimpleTVM TuningJob']['overhead']:.1%}"
        " (target < 5%)"
    )
    print(
        f"warm job: {rows['SimpleTVM, global database warm']['trials']} trials "
        f"({rows['SimpleTVM, global database warm']['trials'] / rows['SimpleTVM TuningJob']['trials']:.2f}"
        f" of the first job's), latency ratio to the first job "
        f"{median['SimpleTVM, global database warm'] / median['SimpleTVM TuningJob']:.3f}"
    )


if __name__ == "__main__":
    main()
