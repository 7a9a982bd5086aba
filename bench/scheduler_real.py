"""Real tuning jobs: sequential, interleaved by the scheduler, and unscheduled.

The thesis' setup on one host: the target device is modelled as a CPU core of its own.
Core 0 is the client (select, build and update of every job, and the scheduler); core 1
is the device: the RPC servers run pinned to it with one thread, and only profiling
runs there. The same jobs (different models, fixed seeds, no transfer learning) are
tuned three ways:

- sequential: the scheduler runs one job after the other (thesis Listing 3)
- interleaved: the scheduler's round-robin policy (Listing 2): one profile at a time
- unscheduled: every job in its own process with its own RPC server, all servers on the
  device core, nothing coordinating them (the thesis' "shared resources" setup)

It reports makespan, client and device utilization, how many profiles overlapped on the
device, and for every job the tuned model's latency measured afterwards on the idle
device core, next to MetaSchedule's estimate from the profiles (estimate / measured far
from 1: the profiles were distorted).

    python bench/scheduler_real.py [--jobs 3] [--trials 8] [--out bench/results/scheduler_real]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler import Scheduler, StageRecord, Trace, client, device
from scheduler.tuning import TuningJobSpec

CLIENT_CORE, DEVICE_CORE = 0, 1
MODELS = [
    ("mobilenetv2", {"alpha": 0.35, "image_size": 64}),
    ("resnet18", {"image_size": 64}),
    ("mobilenet", {"alpha": 0.25, "image_size": 64}),
    ("mobilenetv2", {"alpha": 0.5, "image_size": 64}),
]
RESOURCES = [client("client", capacity=1), device("device", "bench-device")]


def pin(core: int) -> None:
    """Pin this process; processes it starts from now on inherit the core."""
    os.sched_setaffinity(0, {core})


def job_specs(count: int, setup: str, tracker, store: str, tuning: dict) -> list[TuningJobSpec]:
    return [
        TuningJobSpec(
            f"{setup}-{i}-{model}",
            model,
            tracker,
            "bench-device" if setup != "unscheduled" else f"bench-device-{i}",
            store=store,
            run_id=f"{setup[:4]}{i:02d}".ljust(32, "0"),
            context_options={"num_threads": 1},
            model_options=options,
            tuning={**tuning, "seed": i},
        )
        for i, (model, options) in enumerate(MODELS[:count])
    ]


def start_servers(keys: list[str]):
    """A tracker and one single-threaded server per key, all on the device core."""
    from simpletvm.remote.rpc import LocalRPC

    pin(DEVICE_CORE)
    os.environ["TVM_NUM_THREADS"] = "1"
    rpc = LocalRPC(keys, servers=1).start()
    pin(CLIENT_CORE)
    return rpc


def scheduled(policy: str, specs: list[TuningJobSpec]) -> Trace:
    with Scheduler(RESOURCES, policy=policy) as scheduler:
        for spec in specs:
            scheduler.submit(spec)
        return scheduler.run()


def _run_alone(spec: TuningJobSpec) -> None:
    job = spec()
    while (stage := job.next_stage()) is not None:
        result = job.run_stage(stage, stage.resource)
        if not result.ok:
            raise RuntimeError(result.error)


def unscheduled(specs: list[TuningJobSpec], store: str) -> Trace:
    """Every job in its own process at once; the trace is read from their contexts."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_run_alone, args=(spec,)) for spec in specs]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    records = []
    for spec, process in zip(specs, processes):
        if process.exitcode != 0:
            raise SystemExit(f"unscheduled job {spec.job_id} failed (exit {process.exitcode})")
        stages = json.loads((Path(store) / "runs" / spec.run_id / "context.json").read_text())[
            "stages"
        ]
        for s in stages:
            on_device = s["stage"] == "profile"
            records.append(
                (
                    spec.job_id,
                    s,
                    "device" if on_device else "client",
                    "device:bench-device" if on_device else "client",
                )
            )
    origin = min(s["start"] for _, s, _, _ in records)
    trace = Trace(resources=RESOURCES, policy="unscheduled")
    trace.records = [
        StageRecord(
            job,
            s["task"],
            s["iteration"],
            s["stage"],
            resource,
            role,
            s["start"] - origin,
            s["end"] - origin,
        )
        for job, s, resource, role in records
    ]
    return trace


def measure(specs: list[TuningJobSpec], store: str, repeat: int) -> list[dict]:
    """Each job's tuned model on the idle device core, one thread."""
    from simpletvm import BenchmarkingContext, SimpleTVM

    pin(DEVICE_CORE)
    rows = []
    for spec in specs:
        context = json.loads((Path(store) / "runs" / spec.run_id / "context.json").read_text())
        stvm = SimpleTVM(BenchmarkingContext("cpu", num_threads=1, store=store))
        stvm.from_model(spec.model, **spec.model_options).build(records=spec.run_id)
        measured = stvm.evaluate(repeat=repeat, warmup=5).last_evaluation["median_ms"]
        estimate = context["tuning"]["estimated_latency_s"] * 1e3
        rows.append(
            {
                "job": spec.job_id,
                "trials": context["tuning"]["trials"],
                "measured_ms": measured,
                "estimated_ms": estimate,
                "estimate_over_measured": estimate / measured,
            }
        )
    pin(CLIENT_CORE)
    return rows


def summarize(setup: str, trace: Trace, elapsed: float, jobs: list[dict]) -> dict:
    utilization = trace.utilization()
    return {
        "setup": setup,
        "makespan_s": trace.makespan,
        "wall_s": elapsed,
        "client_utilization": utilization["client"],
        "device_utilization": utilization["device"],
        "overlapping_profiles": len(trace.overlaps()),
        "failed": trace.failed,
        "jobs": jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, choices=range(1, len(MODELS) + 1))
    parser.add_argument("--trials", type=int, default=8, help="measured candidates per task")
    parser.add_argument("--candidates-per-iteration", type=int, default=8)
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=50, help="timed inferences per tuned model")
    parser.add_argument("--setups", default="sequential,interleaved,unscheduled")
    parser.add_argument("--out", type=Path, default=Path("bench/results/scheduler_real"))
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("this benchmark needs two cores: one client, one device")

    tuning = {
        "trials": args.trials,
        "candidates_per_iteration": args.candidates_per_iteration,
        "population": args.population,
        "genetic_iterations": 1,
        "transfer_learning": False,
    }
    store = tempfile.mkdtemp(prefix="simpletvm-scheduler-real-")
    args.out.mkdir(parents=True, exist_ok=True)
    keys = ["bench-device"] + [f"bench-device-{i}" for i in range(args.jobs)]
    rpc = start_servers(keys)
    results = []
    try:
        for setup in args.setups.split(","):
            specs = job_specs(args.jobs, setup, rpc.address, store, tuning)
            start = time.perf_counter()
            if setup == "unscheduled":
                trace = unscheduled(specs, store)
            else:
                trace = scheduled("sequential" if setup == "sequential" else "round-robin", specs)
            elapsed = time.perf_counter() - start
            trace.to_csv(args.out / f"trace-{setup}.csv")
            trace.gantt_png(args.out / f"trace-{setup}.png", title=f"{setup}: {args.jobs} jobs")
            results.append(summarize(setup, trace, elapsed, measure(specs, store, args.repeat)))
            print_setup(results[-1])
    finally:
        rpc.stop()
    print_comparison(results)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\ntraces and Gantt charts: {args.out}/")


def print_setup(result: dict) -> None:
    print(
        f"\n{result['setup']}: makespan {result['makespan_s']:.0f} s, client busy "
        f"{result['client_utilization']:.0%}, device busy {result['device_utilization']:.0%}, "
        f"{result['overlapping_profiles']} overlapping profiles"
        + (f", FAILED {result['failed']}" if result["failed"] else "")
    )
    for job in result["jobs"]:
        print(
            f"  {job['job']:<28} {job['trials']:>5} trials  measured {job['measured_ms']:8.3f} ms"
            f"  estimated {job['estimated_ms']:8.3f} ms  ({job['estimate_over_measured']:.2f}x)"
        )


def print_comparison(results: list[dict]) -> None:
    by_setup = {r["setup"]: r for r in results}
    base = by_setup.get("sequential")
    if base is None:
        return
    print(
        f"\n{'setup':<12} {'makespan s':>10} {'vs sequential':>14} {'client':>7} {'device':>7} "
        f"{'overlaps':>8} {'tuned latency vs sequential (per job)':>40}"
    )
    for result in results:
        latency = "  ".join(
            f"{job['measured_ms'] / ref['measured_ms']:.2f}"
            for job, ref in zip(result["jobs"], base["jobs"])
        )
        print(
            f"{result['setup']:<12} {result['makespan_s']:>10.0f} "
            f"{base['makespan_s'] / result['makespan_s']:>13.2f}x "
            f"{result['client_utilization']:>7.0%} {result['device_utilization']:>7.0%} "
            f"{result['overlapping_profiles']:>8} {latency:>40}"
        )


if __name__ == "__main__":
    main()
