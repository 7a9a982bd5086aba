"""How far any schedule could take a model on this host: its kernels timed inside the
model by kind, each kind's GFLOP/s against the host's FMA peak, and the model's latency if
every 1x1 convolution (a matrix product, most of a MobileNet's work) ran at that peak and
everything else as it runs now, beside the fastest peer timed in the same rounds.

    python bench/diagnostics/roofline.py [--models mobilenetv2] [--store DIR --run-id RUN]
                             [--rounds 10] [--runs 20] [--threads 2]
                             [--out bench/results/roofline.json]

Without ``--store`` the model's untuned build (its default schedules) is timed; with it,
the module a tuned run saved (``RUN`` in the store ``DIR``, a built-in model). Each round
probes the host's state (``bench/common/host.py``), times ``--runs`` runs of the module
with the pool recording every kernel's parallel loops
(:func:`simpletvm.runtime.in_situ.kernel_ms`), then the peers, each as many calls after a
warm-up. A kernel's kind comes from its task: ``1x1`` (a convolution whose window is one
pixel), ``depthwise``, ``other conv`` (the stem, Winograd's product and transforms),
``other`` (matmul, pooling, softmax); its FLOPs are TVM's count of its PrimFunc
(``estimate_tir_flops``, the fused bias, clip and residual adds included) times its calls
a run. What no parallel loop covers (the VM's
calls, serial kernels) is ``between the loops``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common
from bench.common.host import (
    SLOW_ABOVE_NS,
    fma_peak,
    fma_peak_program,
    ping_pong_program,
    round_trip_ns,
)
from bench.common.models import import_model, unknown_models
from bench.common.peers import checked_outputs, peer_runners
from simpletvm.errors import SimpleTVMError
from simpletvm.hostinfo import host_description
from simpletvm.runtime.comparison import simpletvm_runner, time_side_by_side
from simpletvm.runtime.fork_join import POOL_VARIABLE

BETWEEN_KIND = "between the loops"


def kernel_kind(task_module) -> str:
    """``1x1``, ``depthwise``, ``other conv`` or ``other``, from the shapes of the task's
    arguments: a convolution's weight is its 4-d argument after the input (HWIO, or
    HW-channels-1 for a depthwise one)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    shapes = [
        info.as_json()[2] for info in ArgInfo.from_entry_func(task_module, remove_preproc=True)
    ]
    if len(shapes) < 3 or len(shapes[0]) != 4 or len(shapes[1]) != 4:
        return "other"
    kh, kw, _, out_channels = shapes[1]
    if out_channels == 1:
        return "depthwise"
    return "1x1" if (kh, kw) == (1, 1) else "other conv"


def tasks_of(stvm, store: str | None, run_id: str | None) -> dict[str, dict]:
    """Per kernel name: kind, calls a run and FLOPs a run, for the module being timed."""
    from tvm.s_tir.analysis import estimate_tir_flops

    from simpletvm.compiler.lowering import extract_tasks

    if store is None:
        fused = stvm.conv_forms.default
    else:
        from bench.common.saved_runs import rebuilt

        _, _, fused = rebuilt(stvm, store, run_id)
    tasks = {}
    for task in extract_tasks(fused, stvm.target):
        module = task.dispatched[0]
        tasks[task.task_name] = {
            "kind": kernel_kind(module),
            "calls": int(task.weight),
            "flop": float(estimate_tir_flops(module)) * int(task.weight),
        }
    return tasks


def module_under_test(name: str, args, scratch: Path):
    """The imported model (for its tasks) and the module to time: the untuned build, or
    the tuned run's saved module."""
    from simpletvm import BenchmarkingContext

    if args.store is None:
        context = BenchmarkingContext("cpu", num_threads=args.threads, store=scratch / "store")
        stvm = import_model(name, context)
        return stvm, stvm.build(records=None)
    from bench.common.saved_runs import load_saved

    saved = load_saved(args.store, args.run_id)
    return saved, saved


def kernels_by_kind(per_round: list[dict[str, float]], tasks: dict[str, dict]) -> dict:
    """Per kind: ms a run (the median over rounds of the kind's sum), FLOPs, kernels, and
    each kernel's median ms a run."""
    kinds: dict[str, dict] = {}
    for name in per_round[0]:
        if name == "whole":
            continue
        task = tasks.get(name) or tasks.get(name.removesuffix("_prepacked"))
        kind = BETWEEN_KIND if task is None else task["kind"]
        entry = kinds.setdefault(kind, {"names": [], "flop": 0.0, "kernels": 0})
        entry["names"].append(name)
        if task is not None:
            entry["flop"] += task["flop"]
            entry["kernels"] += 1
    for entry in kinds.values():
        entry["ms"] = statistics.median(
            sum(one[name] for name in entry["names"]) for one in per_round
        )
        entry["by_kernel_ms"] = {
            name: statistics.median(one[name] for one in per_round) for name in entry["names"]
        }
    return kinds


def one_model(name: str, args, scratch: Path, peak: dict) -> dict:
    import tvm

    from simpletvm.runtime.in_situ import kernel_ms, kernel_names

    stvm, module = module_under_test(name, args, scratch)
    tasks = tasks_of(stvm, args.store, args.run_id)
    spec = stvm.model.inputs[0]
    example = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    peers, reference = peer_runners(name, example, args.threads, scratch)
    checked_outputs(name, {"simpletvm": simpletvm_runner(module, example), **peers}, reference)
    data = tvm.runtime.tensor(example, tvm.cpu())
    probe = ping_pong_program(scratch)
    name_of = kernel_names()
    per_round, peer_ms, trips = [], {peer: [] for peer in peers}, []
    for _ in range(args.rounds):
        trips.append(round_trip_ns(probe))
        spent = kernel_ms(module.vm, tvm.cpu(), [data], args.runs, name_of)
        per_round.append({kernel: statistics.median(ms) for kernel, ms in spent.items()})
        for peer, seconds in time_side_by_side(peers, 1, args.runs, warmup=5).items():
            peer_ms[peer].append(statistics.median(seconds) * 1e3)
    whole = statistics.median(one["whole"] for one in per_round)
    peer_medians = {peer: statistics.median(ms) for peer, ms in peer_ms.items()}
    fastest = min(peer_medians, key=peer_medians.__getitem__)
    kinds = kernels_by_kind(per_round, tasks)
    flop = sum(task["flop"] for task in tasks.values())
    at_peak_ms = kinds["1x1"]["flop"] / (peak["gflops"] * 1e9) * 1e3 if "1x1" in kinds else 0.0
    bound = whole - kinds.get("1x1", {"ms": 0.0})["ms"] + at_peak_ms
    return {
        "model": name,
        "module": "untuned" if args.store is None else f"run {args.run_id}",
        "rounds": args.rounds,
        "runs_a_round": args.runs,
        "slow_rounds": sum(trip > SLOW_ABOVE_NS for trip in trips),
        "round_trip_ns": trips,
        "model_gflop": flop / 1e9,
        "whole_ms": whole,
        "peers_ms": peer_medians,
        "fastest_peer": fastest,
        "x_fastest_peer": whole / peer_medians[fastest],
        "kinds": {
            kind: {
                "kernels": entry["kernels"],
                "ms": entry["ms"],
                "gflop": entry["flop"] / 1e9,
                "gflops": entry["flop"] / (entry["ms"] * 1e-3) / 1e9 if entry["flop"] else None,
                "by_kernel_ms": entry["by_kernel_ms"],
            }
            for kind, entry in sorted(kinds.items(), key=lambda item: -item[1]["ms"])
        },
        "one_by_one_at_peak_ms": at_peak_ms,
        "bound_ms": bound,
        "bound_x_fastest_peer": bound / peer_medians[fastest],
        "peer_gflops": {peer: flop / (ms * 1e-3) / 1e9 for peer, ms in peer_medians.items()},
    }


def print_report(result: dict, peak: dict) -> None:
    fastest = result["fastest_peer"]
    print(
        f"\n{result['model']} ({result['module']}), {result['model_gflop']:.3f} GFLOP a run, "
        f"{result['rounds']} rounds ({result['slow_rounds']} in the slow state); FMA peak "
        f"{peak['gflops']:.1f} GFLOP/s"
    )
    print(
        f"  {'kind':<18} {'kernels':>7} {'ms a run':>9} {'GFLOP':>7} {'GFLOP/s':>8} {'of peak':>8}"
    )
    for kind, entry in result["kinds"].items():
        rate = entry["gflops"]
        print(
            f"  {kind:<18} {entry['kernels'] or '':>7} {entry['ms']:>9.3f} "
            f"{entry['gflop'] or 0:>7.3f} {rate or 0:>8.1f} "
            f"{(rate / peak['gflops']) if rate else 0:>8.1%}"
        )
    whole = result["whole_ms"]
    rate = result["model_gflop"] / (whole * 1e-3)
    print(
        f"  {'whole model':<18} {'':>7} {whole:>9.3f} {result['model_gflop']:>7.3f} {rate:>8.1f} {rate / peak['gflops']:>8.1%}"
    )
    for peer, ms in result["peers_ms"].items():
        peer_rate = result["peer_gflops"][peer]
        print(
            f"  {peer:<18} {'':>7} {ms:>9.3f} {'':>7} {peer_rate:>8.1f} {peer_rate / peak['gflops']:>8.1%}"
        )
    print(
        f"  SimpleTVM / {fastest}: {result['x_fastest_peer']:.3f}; every 1x1 at the FMA peak "
        f"({result['one_by_one_at_peak_ms']:.3f} ms) and the rest as timed: "
        f"{result['bound_ms']:.3f} ms, {result['bound_x_fastest_peer']:.3f}x {fastest}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenetv2")
    parser.add_argument("--store", help="a store holding a tuned run's saved module")
    parser.add_argument("--run-id", help="with --store: the tuned run to time")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=20, help="timed runs a round, each side")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/results/roofline.json"))
    args = parser.parse_args()
    models = [model.strip() for model in args.models.split(",") if model.strip()]
    error = unknown_models(models)
    if error:
        parser.error(error)
    if (args.store is None) != (args.run_id is None):
        parser.error("--store and --run-id go together")
    if args.store is not None and len(models) != 1:
        parser.error("--store times one tuned run: give its model alone in --models")
    os.environ[POOL_VARIABLE] = "timed"  # before the pool loads with the first module
    results = []
    with tempfile.TemporaryDirectory(prefix="roofline-") as scratch:
        peak = fma_peak(fma_peak_program(Path(scratch)), args.threads)
        for model in models:
            try:
                result = one_model(model, args, Path(scratch), peak)
            except SimpleTVMError as error:  # a run or store that is not there: say so
                raise SystemExit(f"roofline: {error}") from None
            print_report(result, peak)
            results.append(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"host": host_description(), "fma_peak": peak, "results": results}, indent=2)
    )
    print(f"\nresults: {args.out}")


if __name__ == "__main__":
    main()
