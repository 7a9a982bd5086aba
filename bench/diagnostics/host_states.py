"""What a slow state of the host costs each framework: the untuned module on 2 threads
and on 1, and the peers on 2, timed in alternating rounds for a while, each round
labelled by how long the two cores take to pass a cache line back and forth.

The 2-core hosts this project measures on switch, within seconds to minutes, between a
state where the cores pass a cache line in about 0.05 us and one where it takes about
0.4 (the cores far apart). What a kernel reads that the other core wrote, and weights
both cores stream from memory, cost more in the slow state; a framework whose cores each
read what they wrote themselves hardly notices it. The report: per runner, the median of
its round medians in the fast rounds and in the slow ones, and slow / fast. A run that
never sees a slow state says so (run it longer, or again).

    python bench/host_states.py [--models resnet18,mobilenetv2,quickstart] [--minutes 6]
                                [--calls 15] [--slow-above-ns 200]
                                [--out bench/results/host_states.json]

Needs a C compiler (``cc``) for the cache-line probe, as the fork-join pool does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import host_description
from round_trip import SLOW_ABOVE_NS, ping_pong_program, round_trip_ns
from time_to_peers import BUILTIN, peer_runners


def untuned_runners(name: str, scratch: Path):
    """The untuned module on 2 threads and on 1, and the example it runs on."""
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.runtime.comparison import at_thread_counts, simpletvm_runner

    context = BenchmarkingContext("cpu", num_threads=2, store=scratch / "store")
    model, options = BUILTIN[name]
    stvm = SimpleTVM(context).from_model(model, **options).build(records=None)
    spec = stvm.model.inputs[0]
    example = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    return at_thread_counts({"module": simpletvm_runner(stvm, example)}, [2, 1]), example


def measure(name: str, args, scratch: Path, program: Path) -> dict:
    scratch.mkdir(parents=True)
    counts, example = untuned_runners(name, scratch)
    peers, _ = peer_runners(name, example, 2, scratch)
    with counts as module:
        runners = {
            "SimpleTVM untuned, 2 threads": module["module"][2],
            "SimpleTVM untuned, 1 thread": module["module"][1],
            **{f"{peer}, 2 threads": infer for peer, infer in peers.items()},
        }
        rounds = labelled_rounds(runners, args.minutes, args.calls, program)
    return {"model": name, **summarize(rounds, args.slow_above_ns)}


def labelled_rounds(
    runners: dict, minutes: float, calls: int, program: Path, *, alternate: bool = False
) -> list[dict]:
    """Rounds of ``calls`` timed calls of every runner for ``minutes``, each labelled by
    the cache-line round trip before it: ``{"round_trip_ns", "ms": runner -> median}``.
    ``alternate``: every other round runs the runners in reverse order."""
    from simpletvm.runtime.comparison import time_side_by_side

    rounds = []
    end = time.time() + minutes * 60
    while time.time() < end:
        trip = round_trip_ns(program)
        order = list(runners)[::-1] if alternate and len(rounds) % 2 else list(runners)
        samples = time_side_by_side(
            {label: runners[label] for label in order}, rounds=1, calls=calls, warmup=3
        )
        medians = {label: float(np.median(s)) * 1e3 for label, s in samples.items()}
        rounds.append({"round_trip_ns": trip, "ms": medians})
    return rounds


def summarize(rounds: list[dict], slow_above_ns: int) -> dict:
    """Rounds (each a ``round_trip_ns`` and each runner's median ``ms``) split by state:
    how many of each, and per runner the median of its round medians in each state."""
    slow = [r for r in rounds if r["round_trip_ns"] > slow_above_ns]
    fast = [r for r in rounds if r["round_trip_ns"] <= slow_above_ns]
    summary = {}
    for label in rounds[0]["ms"]:
        fast_ms = statistics.median(r["ms"][label] for r in fast) if fast else None
        slow_ms = statistics.median(r["ms"][label] for r in slow) if slow else None
        summary[label] = {
            "fast_ms": fast_ms,
            "slow_ms": slow_ms,
            "slow_over_fast": slow_ms / fast_ms if fast and slow else None,
        }
    return {
        "fast_rounds": len(fast),
        "slow_rounds": len(slow),
        "summary": summary,
        "rounds": rounds,
    }


def print_result(result: dict) -> None:
    print(
        f"{result['model']}: {result['fast_rounds']} fast rounds, "
        f"{result['slow_rounds']} slow rounds"
    )
    if not result["fast_rounds"] or not result["slow_rounds"]:
        print("  the host stayed in one state: run longer, or again")
    for label, times in result["summary"].items():
        fast = f"{times['fast_ms']:.3f}" if times["fast_ms"] is not None else "-"
        slow = f"{times['slow_ms']:.3f}" if times["slow_ms"] is not None else "-"
        ratio = f"{times['slow_over_fast']:.2f}" if times["slow_over_fast"] else "-"
        print(f"  {label:32s} fast {fast:>8s} ms  slow {slow:>8s} ms  slow / fast {ratio}")


def save(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))


def add_round_options(parser: argparse.ArgumentParser, models: str, minutes: float, out: str):
    """The options of a script that times built-in models in rounds labelled by state."""
    parser.add_argument("--models", default=models)
    parser.add_argument("--minutes", type=float, default=minutes, help="per model")
    parser.add_argument("--calls", type=int, default=15, help="timed calls per runner a round")
    parser.add_argument("--slow-above-ns", type=int, default=SLOW_ABOVE_NS)
    parser.add_argument("--out", type=Path, default=Path(out))


def chosen_models(parser: argparse.ArgumentParser, args) -> list[str]:
    """The built-in models ``--models`` names; an unknown one is a usage error."""
    names = args.models.split(",")
    unknown = [name for name in names if name not in BUILTIN]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(BUILTIN)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_options(
        parser, "resnet18,mobilenetv2,quickstart", 6.0, "bench/results/host_states.json"
    )
    args = parser.parse_args()
    models = chosen_models(parser, args)
    results = {"host": host_description(), "slow_above_ns": args.slow_above_ns, "models": []}
    with tempfile.TemporaryDirectory(prefix="host-states-") as scratch_dir:
        scratch = Path(scratch_dir)
        program = ping_pong_program(scratch)
        for name in models:
            result = measure(name, args, scratch / name, program)
            print_result(result)
            results["models"].append(result)
            save(results, args.out)  # after each model: a run cut short keeps what it measured
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
