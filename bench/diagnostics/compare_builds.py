"""What a change to the compiler buys: two commits' builds of a model, untuned or from the
same records, timed side by side in alternating rounds, each round labelled by the
host's state.

Each commit is checked out into a scratch worktree (``git worktree``) and builds the
model there with its own code (``build(records=None)``: the default schedules, no
record; with ``--records STORE``, ``build(records=STORE)``: a tuned store's records,
the same for both), so a change to the default schedules, the layer forms or the
lowering is measured as a user of either commit would get it. Both modules then run in this process
on the same input, their outputs checked against each other (the largest difference at
most a thousandth of the largest value), on ``--threads`` threads, taking turns round by
round; before each round the cache-line probe (``bench/common/host.py``) labels it fast or
slow. The report: per model, each build's median in the fast rounds and in the slow
ones, and head / base.

    python bench/diagnostics/compare_builds.py --base REV [--head REV] [--models mobilenetv2,resnet18]
                                   [--records STORE] [--minutes 3] [--threads 2] [--calls 15]
                                   [--out bench/results/compare_builds.json]

``--head`` defaults to the working tree as it is (uncommitted changes included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common
from bench.common.host import ping_pong_program
from bench.common.models import BUILTIN
from bench.common.rounds import (
    add_round_options,
    chosen_models,
    labelled_rounds,
    print_result,
    save,
    summarize,
)
from simpletvm.hostinfo import host_description

REPOSITORY = Path(__file__).resolve().parents[2]

# run inside a commit's tree: its own SimpleTVM builds the module and saves it
EXPORT = """
import json, sys
from simpletvm import BenchmarkingContext, SimpleTVM
model, options, store, out, records = sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:]
context = BenchmarkingContext("cpu", store=store)
SimpleTVM(context).from_model(model, **options).build(records=records or None).save(out)
"""


def export_build(tree: Path, name: str, scratch: Path, records: Path | None) -> Path:
    """The module of built-in model ``name`` as the code in ``tree`` builds it from
    ``records`` (None: untuned), saved under ``scratch``."""
    model, options = BUILTIN[name]
    out = scratch / "module"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            EXPORT,
            model,
            json.dumps(options),
            str(scratch / "store"),
            str(out),
            str(records or ""),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"building {name} at {tree} failed:\n{done.stderr.strip()[-2000:]}")
    return out


def checked_out(revision: str, scratch: Path) -> Path:
    """A worktree of ``revision`` under ``scratch``."""
    tree = scratch / "tree"
    subprocess.run(
        ["git", "-C", str(REPOSITORY), "worktree", "add", "--detach", "-q", str(tree), revision],
        check=True,
    )
    return tree


def measure(name: str, modules: dict[str, Path], args, program: Path) -> dict:
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.runtime.comparison import at_thread_counts, simpletvm_runner

    loaded = {
        label: SimpleTVM(BenchmarkingContext("cpu", num_threads=args.threads)).load(path)
        for label, path in modules.items()
    }
    spec = next(iter(loaded.values())).model.inputs[0]
    example = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    infer = {label: simpletvm_runner(stvm, example) for label, stvm in loaded.items()}
    outputs = {label: np.asarray(run()).copy() for label, run in infer.items()}
    base, head = outputs.values()
    difference = float(np.max(np.abs(base - head)))
    if difference > 1e-3 * float(np.max(np.abs(base))):
        raise SystemExit(f"{name}: the two builds' outputs differ by {difference}")
    with at_thread_counts(infer, [args.threads]) as by_count:
        runners = {label: by_count[label][args.threads] for label in infer}
        rounds = labelled_rounds(runners, args.minutes, args.calls, program, alternate=True)
    result = {
        "model": name,
        "largest_difference": difference,
        **summarize(rounds, args.slow_above_ns),
    }
    for state in ("fast", "slow"):
        times = [result["summary"][label][f"{state}_ms"] for label in modules]
        result[f"head_over_base_{state}"] = times[1] / times[0] if None not in times else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare against")
    parser.add_argument("--head", help="the commit measured (default: the working tree)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--records", type=Path, help="a tuned store both commits build from (default: untuned)"
    )
    add_round_options(parser, "mobilenetv2,resnet18", 3.0, "bench/results/compare_builds.json")
    args = parser.parse_args()
    models = chosen_models(parser, args)
    sides = {"base": args.base, "head": args.head}
    if args.records is not None and not args.records.exists():
        parser.error(f"--records: no store at {args.records}")
    results = {
        "host": host_description(),
        **sides,
        "records": str(args.records) if args.records else None,
        "models": [],
    }
    with tempfile.TemporaryDirectory(prefix="compare-builds-") as scratch_dir:
        scratch = Path(scratch_dir)
        program = ping_pong_program(scratch)
        trees = {
            side: checked_out(revision, scratch / side) if revision else REPOSITORY
            for side, revision in sides.items()
        }
        try:
            for name in models:
                modules = {
                    f"{side} ({sides[side] or 'working tree'})": export_build(
                        tree, name, scratch / side / name, args.records
                    )
                    for side, tree in trees.items()
                }
                result = measure(name, modules, args, program)
                print_result(result)
                ratios = [result[f"head_over_base_{state}"] for state in ("fast", "slow")]
                fast, slow = (f"{r:.3f}" if r is not None else "-" for r in ratios)
                print(f"  head / base: fast {fast}, slow {slow}")
                results["models"].append(result)
                save(results, args.out)  # after each model: a run cut short keeps what it measured
        finally:
            for tree in trees.values():
                if tree != REPOSITORY:
                    subprocess.run(
                        ["git", "-C", str(REPOSITORY), "worktree", "remove", "--force", str(tree)],
                        check=False,
                    )
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
