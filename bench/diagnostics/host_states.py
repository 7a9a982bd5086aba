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

    python bench/diagnostics/host_states.py [--models resnet18,mobilenetv2,quickstart] [--minutes 6]
                                [--calls 15] [--slow-above-ns 200]
                                [--out bench/results/host_states.json]

Needs a C compiler (``cc``) for the cache-line probe, as the fork-join pool does.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common
from bench.common.host import ping_pong_program
from bench.common.models import BUILTIN
from bench.common.peers import peer_runners
from bench.common.rounds import (
    add_round_options,
    chosen_models,
    labelled_rounds,
    print_result,
    save,
    summarize,
)
from simpletvm.hostinfo import host_description


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
