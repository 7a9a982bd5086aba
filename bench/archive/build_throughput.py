"""Build stage throughput: SimpleTVM's PersistentBuilder against MetaSchedule's LocalBuilder.

Both build the same candidates (one MobileNetV2 convolution task, one search batch) with
the same number of workers, in one run on one machine. Prints candidates per second,
errors (timeouts included) and the ratio.

    python bench/archive/build_throughput.py [--candidates 16] [--workers 2] [--batches 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def candidates_of_a_conv_task(count: int):
    from tvm.s_tir import meta_schedule as ms

    from simpletvm.compiler.lowering import extract_tasks, fuse
    from simpletvm.models import import_model
    from simpletvm.targets import load_tensor_intrinsics, resolve_target

    target = resolve_target("cpu")
    load_tensor_intrinsics(target.kind)
    model = import_model(
        "mobilenetv2",
        alpha=0.35,
        image_size=96,
        cache_dir=os.path.join(tempfile.gettempdir(), "simpletvm-bench-zoo"),
    )
    tasks = extract_tasks(fuse(model.mod, target), target)
    task = max((t for t in tasks if "conv2d" in t.task_name), key=lambda t: t.weight)
    context = ms.TuneContext(
        mod=task.dispatched[0],
        target=target.tvm_target(),
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(),
        task_name=task.task_name,
        rand_state=0,
        num_threads=1,
    )
    context.pre_tuning(
        max_trials=count,
        num_trials_per_iter=count,
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    candidates = context.search_strategy.generate_measure_candidates()
    return (
        task.task_name,
        target,
        [ms.builder.BuilderInput(c.sch.mod, target.tvm_target()) for c in candidates],
    )


def timed_build(builder, inputs) -> tuple[float, int, set[str]]:
    start = time.perf_counter()
    results = builder.build(inputs)
    elapsed = time.perf_counter() - start
    errors = [r.error_msg for r in results if r.error_msg]
    return elapsed, len(errors), {e.splitlines()[0][:60] for e in errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--patient-timeout", type=float, default=600.0)
    args = parser.parse_args()

    from tvm.s_tir.meta_schedule.builder import LocalBuilder

    from simpletvm.tuning.builder import PersistentBuilder

    task_name, target, inputs = candidates_of_a_conv_task(args.candidates)
    print(
        f"task {task_name}: {len(inputs)} candidates, {args.workers} workers, "
        f"{args.batches} batches each, {os.cpu_count()} cores"
    )
    rows = []
    persistent = PersistentBuilder(target.kind, max_workers=args.workers)
    try:
        for batch in range(args.batches):
            rows.append(("PersistentBuilder", batch, *timed_build(persistent, inputs)))
    finally:
        persistent.close()
    stock = LocalBuilder(max_workers=args.workers)  # MetaSchedule's defaults: 30 s timeout
    for batch in range(args.batches):
        rows.append(("LocalBuilder", batch, *timed_build(stock, inputs)))
    # the same builder given time to finish its imports: its throughput without timeouts
    patient = LocalBuilder(max_workers=args.workers, timeout_sec=args.patient_timeout)
    rows.append(
        (f"LocalBuilder(timeout {args.patient_timeout:.0f} s)", 0, *timed_build(patient, inputs))
    )

    print("\n| builder | batch | seconds | candidates/s | errors | error kinds |")
    print("|---|---:|---:|---:|---:|---|")
    for name, batch, seconds, errors, kinds in rows:
        print(
            f"| {name} | {batch} | {seconds:.2f} | {len(inputs) / seconds:.2f} | "
            f"{errors}/{len(inputs)} | {'; '.join(sorted(kinds)) or '-'} |"
        )

    def rate(name: str, successful: bool) -> float:
        """Candidates per second over all batches of ``name`` (built ones, or all)."""
        mine = [r for r in rows if r[0] == name]
        built = sum(len(inputs) - r[3] for r in mine) if successful else len(inputs) * len(mine)
        return built / sum(r[2] for r in mine)

    ours = rate("PersistentBuilder", True)
    for name in ("LocalBuilder", f"LocalBuilder(timeout {args.patient_timeout:.0f} s)"):
        theirs, tried = rate(name, True), rate(name, False)
        ratio = f"{ours / theirs:.1f}x" if theirs else "infinite (it built none)"
        print(
            f"PersistentBuilder against {name}: built candidates/s {ours:.2f} vs "
            f"{theirs:.3f}, ratio {ratio}; attempted candidates/s ratio "
            f"{rate('PersistentBuilder', False) / tried:.1f}x"
        )


if __name__ == "__main__":
    main()
