"""Which thread pool and settings hold latency, quiet and beside another busy process.

A module's parallel loops run on SimpleTVM's fork-join pool (``simpletvm.runtime.fork_join``:
waits with the pause instruction) unless ``SIMPLETVM_FORK_JOIN_POOL=tvm`` keeps TVM's.
TVM's pool pins its worker threads to cores (``TVM_BIND_THREADS``) and lets idle workers
spin, yielding to the system, before they sleep (``TVM_THREAD_POOL_SPIN_COUNT``; 0 also
keeps TVM's pool). On a machine whose cores are shared, a pinned, spinning worker waits
for a core that another process holds. Each setting runs in its own process (the
runtime reads them once), loading one saved module and calling it from Python, in
alternating rounds, first on a quiet machine, then with a busy-looping process beside
it; the table gives median and p90 per call. Every setting runs on all cores but two:
one thread, and the count SimpleTVM's load chooses by timing the module
(``simpletvm.runtime.threads``). First it times what a parallel kernel pays to fork onto each
pool and join, on every core and on one.

    python bench/diagnostics/runtime_threads.py --run-id RUN_ID [--store DIR] [--rounds 5]
                                    [--calls 50] [--out bench/results/runtime_threads.json]

RUN_ID is a run whose module was saved (``simpletvm quickstart`` saves one; so does
``bench/peers.py``, which prints the run ids and the store).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CORES = os.cpu_count() or 1
# setting -> (threads: a count, or "measured" for SimpleTVM's choice at load, environment)
TVM_POOL = {"SIMPLETVM_FORK_JOIN_POOL": "tvm"}
SETTINGS = {
    "SimpleTVM's pool": (CORES, {}),
    "TVM's pool: bind, spin": (CORES, TVM_POOL),
    "TVM's pool: no bind, spin": (CORES, {**TVM_POOL, "TVM_BIND_THREADS": "0"}),
    "TVM's pool: bind, no spin": (CORES, {"TVM_THREAD_POOL_SPIN_COUNT": "0"}),
    "TVM's pool: no bind, no spin": (
        CORES,
        {"TVM_BIND_THREADS": "0", "TVM_THREAD_POOL_SPIN_COUNT": "0"},
    ),
    "1 thread": (1, {}),
    "threads chosen at load": ("measured", {}),
}


def child(run_id: str, store: str | None, calls: int, warmup: int, threads: str) -> None:
    """Load the module, call it, print per-call seconds as JSON (one setting)."""
    import time

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.runtime.comparison import simpletvm_runner

    pinned = None if threads == "measured" else int(threads)
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store, num_threads=pinned)).load(run_id)
    spec = stvm.model.inputs[0]
    example = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    infer = simpletvm_runner(stvm, example)
    for _ in range(warmup):
        infer()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        infer()
        samples.append(time.perf_counter() - start)
    print(json.dumps(samples))


def busy_loop() -> None:
    while True:
        pass


def fork_join_us(repeat: int = 20, number: int = 2000) -> dict[str, dict[str, float]]:
    """Microseconds per call of a parallel kernel that does nothing, per pool and thread
    count: what every parallel kernel of a model pays to fork onto the pool and join.
    Once per process: TVM's pool is timed first, since SimpleTVM's, once in use, is the
    one ``set_runtime_threads`` resizes. SimpleTVM's caller runs a task no worker has
    claimed yet, so for a kernel this short it may run both, and the figure is a floor."""
    import tvm
    from tvm import te

    from simpletvm.runtime.fork_join import use_for_loaded_kernels
    from simpletvm.runtime.threads import set_runtime_threads

    source = te.placeholder((CORES,), "float32", name="source")
    sink = te.compute((CORES,), lambda i: source[i] + 1.0, name="sink")
    schedule = tvm.s_tir.Schedule(te.create_prim_func([source, sink]))
    schedule.parallel(schedule.get_loops(schedule.get_sblock("sink"))[0])
    scratch = tempfile.TemporaryDirectory(prefix="fork-join-")  # removed on return
    library = Path(scratch.name) / "noop.so"
    # a loaded library, as SimpleTVM loads models: LLVM's JIT would keep TVM's pool
    tvm.compile(schedule.mod, target={"kind": "llvm"}).export_library(str(library))
    kernel = tvm.runtime.load_module(str(library))
    buffers = [tvm.runtime.tensor(np.zeros(CORES, "float32")) for _ in range(2)]
    timer = kernel.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat)
    costs: dict[str, dict[str, float]] = {}
    for pool in ("tvm", "simpletvm"):
        if pool == "simpletvm":
            use_for_loaded_kernels(CORES)
        for threads in sorted({CORES, 1}, reverse=True):
            set_runtime_threads(threads)
            costs.setdefault(pool, {})[str(threads)] = (
                float(np.median(timer(*buffers).results)) * 1e6
            )
    return costs


def measure(args, threads: int | str, environment: dict[str, str]) -> list[float]:
    command = [
        sys.executable,
        __file__,
        "--child",
        "--run-id",
        args.run_id,
        "--calls",
        str(args.calls),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(threads),
    ]
    if args.store:
        command += ["--store", args.store]
    done = subprocess.run(
        command, env={**os.environ, **environment}, check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--store", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", default="measured", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("bench/results/runtime_threads.json"))
    args = parser.parse_args()
    if args.child:
        child(args.run_id, args.store, args.calls, args.warmup, args.threads)
        return
    os.environ["TVM_NUM_THREADS"] = str(CORES)
    results = {"fork_join_us": fork_join_us()}
    for pool, costs in results["fork_join_us"].items():
        print(
            f"a parallel kernel that does nothing, {pool}'s pool, us per call: "
            + ", ".join(f"{us:.2f} on {threads} thread(s)" for threads, us in costs.items())
        )
    for load in ("quiet", "one busy process beside"):
        spinner = None
        if load != "quiet":
            spinner = multiprocessing.Process(target=busy_loop, daemon=True)
            spinner.start()
        samples: dict[str, list[float]] = {name: [] for name in SETTINGS}
        try:
            for _ in range(args.rounds):
                for name, (threads, environment) in SETTINGS.items():
                    samples[name] += measure(args, threads, environment)
        finally:
            if spinner is not None:
                spinner.terminate()
        results[load] = {
            name: {
                "median_ms": float(np.median(s)) * 1e3,
                "p90_ms": float(np.percentile(s, 90)) * 1e3,
            }
            for name, s in samples.items()
        }
        print(f"\n{load}: run {args.run_id}, {args.rounds} rounds of {args.calls} calls")
        print(f"  {'setting':<30} {'median ms':>10} {'p90 ms':>9}")
        for name, stats in results[load].items():
            print(f"  {name:<30} {stats['median_ms']:>10.3f} {stats['p90_ms']:>9.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nresults: {args.out}")


if __name__ == "__main__":
    main()
