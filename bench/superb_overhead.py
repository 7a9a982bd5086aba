"""superb's own cost per run: everything but SimpleTVM's work.

Sweeps a tiny ONNX model, untuned with one timed inference (so SimpleTVM's part is
small), as a real ``python -m superb run`` process, twice: with 1 run and with N runs.

- per run, from runs.csv: ``overhead_s`` = the run's wall time seen by superb (process
  start to result) minus the time the child spent in SimpleTVM (context creation to
  ``ctx.save()``);
- marginal: (wall(N runs) - wall(1 run)) / (N - 1) minus SimpleTVM's mean time, which
  also counts what superb does between runs (log, runs.csv and aggregate.csv rewrites);
- fixed: the sweep's start and end (imports, checks, fork server start).

    python bench/superb_overhead.py [--runs 20]

The goal is under 1 s per run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 1.0


def tiny_model(path: Path) -> Path:
    source = REPO / "tests" / "simpletvm" / "model_factories.py"
    spec = importlib.util.spec_from_file_location("model_factories", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_tiny_cnn_onnx(path)


def sweep(directory: Path, model: Path, runs: int) -> tuple[float, object]:
    import pandas as pd

    name = f"overhead-{runs}"
    grid = directory / f"{name}.yaml"
    seeds = ", ".join(str(i) for i in range(runs))
    grid.write_text(
        f"name: {name}\n"
        f"fixed: {{model: {model}, autotune: false, evaluate_repeat: 1, "
        f"evaluate_warmup: 0}}\n"
        f"grid: {{evaluate_seed: [{seeds}]}}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "superb",
            "run",
            str(grid),
            "--store",
            str(directory / "store"),
            "--plain",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"superb failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    frame = pd.read_csv(directory / "store" / "superb" / name / "runs.csv")
    return wall, frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs in the long sweep")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="superb-overhead-") as tmp:
        directory = Path(tmp)
        model = tiny_model(directory / "tiny.onnx")
        sweep(directory, model, 1)  # warm the OS caches once; not counted
        wall_1, one = sweep(directory, model, 1)
        wall_n, many = sweep(directory, model, args.runs)
    simpletvm = many["wall_s"] - many["overhead_s"]
    per_run = many["overhead_s"]
    marginal = (wall_n - wall_1) / (args.runs - 1) - simpletvm.mean()
    fixed = wall_1 - one["wall_s"].iloc[0]
    print(f"superb overhead, {args.runs} untuned runs of a tiny ONNX model ({os.cpu_count()} CPUs)")
    print(f"  SimpleTVM's work per run   mean {simpletvm.mean():.3f} s")
    print(
        f"  overhead per run (csv)     mean {per_run.mean() * 1e3:.1f} ms, median "
        f"{statistics.median(per_run) * 1e3:.1f} ms, max {per_run.max() * 1e3:.1f} ms"
    )
    print(
        f"  marginal cost of a run     {marginal * 1e3:.1f} ms "
        f"(sweep of {args.runs}: {wall_n:.2f} s, of 1: {wall_1:.2f} s)"
    )
    print(f"  fixed start and end        {fixed:.2f} s per sweep")
    worst = max(per_run.max(), marginal)
    print(f"  goal < {GOAL_S:.0f} s per run: {'met' if worst < GOAL_S else 'MISSED'}")


if __name__ == "__main__":
    main()
