"""How long a user waits to beat the peers: the measured latency of the module built from
one ``autotune(minutes=M)`` run's records at checkpoints of that run, each timed against
the peers in the same rounds.

    python bench/time_to_peers.py [--models mobilenetv2,resnet18,quickstart,FILE.tflite]
                                  [--minutes 15] [--checkpoints 0,1,2,5,10,15]
                                  [--runs 1] [--first-seed 0]
                                  [--warm-from STORE[,STORE...]] [--keep-stores DIR]
                                  [--threads 2] [--out bench/results/time_to_peers]
    python bench/time_to_peers.py --retime KEPT_STORE[,KEPT_STORE...] [--out DIR]

Each run tunes on a fresh store: empty (cold), or holding the records and cost models
of the stores ``--warm-from`` names (warm: give stores that tuned other models, not this
one; keep a cold run's store with ``--keep-stores``). While it tunes, the store's records are copied
at the first stage that ends after each checkpoint, with the job's trials and estimate
at that moment; the last checkpoint is the store after the run (its closing round
included). Each copy then gets the round of timing inside the model that autotune ends
with (``choose_in_model``, its seconds reported), in checkpoint order, each starting from
the choices of the checkpoint before: what a user who tuned the same store in steps would
get, and what makes a later checkpoint no slower than an earlier one (an autotune of the
whole budget alone times its records against the default schedules only). Then a module
is built from each copy (checkpoint 0: the untuned build, or
the warm store's records) and all of them are timed with the peers in alternating
rounds, after every output is checked against the reference (TensorFlow's for a built-in
model, TFLite's for a ``.tflite`` file, which is imported as shipped): the largest
difference at most a thousandth of the reference's largest value. A checkpoint whose
library is byte for byte an earlier one's (its round kept every choice) is that module,
timed once.

Built-in models: ``mobilenetv2`` and ``resnet18`` at 224x224, ``quickstart`` (the
quickstart's MobileNetV2, width 0.35, 96x96); their peers are TFLite (XNNPACK), ONNX
Runtime and OpenVINO, as in ``bench/peers.py``. A ``.tflite`` file's peer is TFLite.
The report: per checkpoint the measured latency, its ratio to the fastest peer, the
estimate (kernels timed alone) and measured / estimate, and measured over the estimate
timed inside the model (over all rounds, and over the rounds in the host state that
round ran in), and in how many rounds it ran slower than the checkpoint before
(each round's median; all of them in the JSON); a PNG of latency against minutes with
the peers as horizontal lines. Before each timing round, and before and after each round
inside the model, the host's state is probed (how long its two CPUs take to pass a cache
line back and forth, ``bench/common/host.py``; slow above 200 ns) and kept with the run.
``--retime`` times the module each kept store's run saved (its last
checkpoint) with the peers again: the host's state moves within minutes, and a run's
rounds can all fall in one state.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common

from bench.common.host import SLOW_ABOVE_NS, ping_pong_program, round_trip_ns
from bench.common.models import BUILTIN, import_model
from bench.common.peers import checked_outputs, peer_runners
from bench.common.rounds import round_medians_ms, same_state_ratio
from bench.common.saved_runs import carry_in_model_choices, copy_records, warm_store
from simpletvm.hostinfo import host_description

PEERS = ("tflite", "onnxruntime", "openvino")


def in_model_seconds(stvm) -> float:
    """How long the model's last in-model round (``choose_in_model``) took."""
    step = next(s for s in reversed(stvm.context.steps) if s["step"] == "in_model")
    return round(step["duration_s"], 1)


def medians_ms(samples: dict) -> tuple[dict[str, float], dict[str, float], str]:
    """Median ms per runner, the peers' among them, and the fastest peer."""
    medians = {label: float(np.median(s)) * 1e3 for label, s in samples.items()}
    peers = {peer: medians[peer] for peer in PEERS if peer in medians}
    return medians, peers, min(peers, key=peers.__getitem__)


def one_run(name: str, run: int, args, scratch: Path, host: dict) -> dict:
    """Tune ``name`` once with checkpoints, then time every checkpoint's module with the
    peers."""
    from simpletvm import BenchmarkingContext
    from simpletvm.api import MODULE_FILE
    from simpletvm.runtime.comparison import simpletvm_runner, time_side_by_side

    store = scratch / f"store-{run}"
    store.mkdir(parents=True)
    probe = ping_pong_program(scratch)
    context = BenchmarkingContext("cpu", num_threads=args.threads, store=store)
    records_path = context.store.records_path
    warm_records = warm_store(args.warm_from, context.store) if args.warm_from else 0
    stvm = import_model(name, context)
    example = (
        np.random.default_rng(0)
        .standard_normal(stvm.model.inputs[0].shape)
        .astype(stvm.model.inputs[0].dtype)
    )
    copies: dict[float, dict] = {}
    if warm_records:
        copy_records(records_path, scratch / f"records-{run}-0.sqlite")
    copies[0.0] = {
        "at_s": 0.0,
        "trials": 0,
        "records": str(scratch / f"records-{run}-0.sqlite") if warm_records else None,
    }
    pending = sorted(c for c in args.checkpoints if 0 < c < args.minutes)
    began = time.time()

    def on_stage(job) -> None:
        elapsed = time.time() - began
        while pending and elapsed >= pending[0] * 60:
            checkpoint = pending.pop(0)
            path = scratch / f"records-{run}-{checkpoint:g}.sqlite"
            copy_records(records_path, path)
            summary = job.summary()
            measured = sum(t["best_latency_s"] is not None for t in summary["tasks"])
            copies[checkpoint] = {
                "at_s": round(elapsed, 1),
                "trials": job.trials,
                "records": str(path),
                "estimated_ms": summary["estimated_latency_s"] * 1e3,
                "tasks_measured": f"{measured} of {summary['num_tasks']}",
            }
            print(f"  {checkpoint:g} min: {job.trials} trials", flush=True)

    stvm.autotune(minutes=args.minutes, seed=run, on_stage=on_stage, in_model=False)
    path = scratch / f"records-{run}-{args.minutes:g}.sqlite"
    copy_records(records_path, path)
    summary = stvm.tuning_summary
    copies[float(args.minutes)] = {
        "at_s": round(time.time() - began, 1),
        "trials": summary["trials"],
        "records": str(path),
        "estimated_ms": summary["estimated_latency_s"] * 1e3,
        "tasks_measured": f"{sum(t['best_latency_s'] is not None for t in summary['tasks'])} "
        f"of {summary['num_tasks']}",
    }
    runners, reference = peer_runners(name, example, args.threads, scratch)
    earlier = None
    modules: dict[str, str] = {}  # a library's digest -> the first checkpoint built to it
    for checkpoint, copy in sorted(copies.items()):
        # the tuned session's own build is saved under its run
        session = (
            stvm
            if checkpoint == args.minutes
            else import_model(
                name, BenchmarkingContext("cpu", num_threads=args.threads, store=store)
            )
        )
        if checkpoint > 0:  # what autotune does when its search ends: here, at this copy
            if earlier is not None:
                carry_in_model_choices(earlier, Path(copy["records"]))
            trip_before = round_trip_ns(probe)
            session.choose_in_model(copy["records"])
            copy["in_model_round_trip_ns"] = [trip_before, round_trip_ns(probe)]
            copy["in_model_s"] = in_model_seconds(session)
            copy["in_model_estimate_ms"] = session.in_model.chosen_model_ms
            # both builds as the round timed them: a state of the host moves both
            copy["in_model_builds_ms"] = [
                session.in_model.challengers_model_ms,
                session.in_model.incumbents_model_ms,
            ]
            copy["in_model_kept"] = len(session.in_model.kept)
            copy["in_model_kept_as_a_whole"] = session.in_model.kept_as_a_whole
            copy["in_model_form_switches"] = session.in_model.form_switches
            earlier = Path(copy["records"])
        began_build = time.perf_counter()
        built = session.build(records=copy["records"])
        copy["build_s"] = round(time.perf_counter() - began_build, 1)
        module_dir = (
            stvm.store.module_dir(stvm.context.run_id)
            if session is stvm
            else scratch / f"module-{run}-{checkpoint:g}"
        )
        built.save(module_dir)
        digest = hashlib.sha256((module_dir / MODULE_FILE).read_bytes()).hexdigest()
        if digest in modules:  # the same library as an earlier checkpoint's: timed once
            copy["same_module_as"] = modules[digest]
        else:
            modules[digest] = f"{checkpoint:g} min"
            runners[f"{checkpoint:g} min"] = simpletvm_runner(built, example)
    agreement = checked_outputs(name, runners, reference)
    samples: dict[str, list[float]] = {label: [] for label in runners}
    round_trips = []  # the host's state before each round
    for _ in range(args.rounds):
        round_trips.append(round_trip_ns(probe))
        for label, times in time_side_by_side(runners, 1, args.calls, args.warmup).items():
            samples[label].extend(times)
    if args.keep_stores:
        kept = args.keep_stores / f"{Path(name).stem}-{'warm' if args.warm_from else 'cold'}-{run}"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(store, kept)
        print(f"  store kept: {kept}", flush=True)

    medians, peers, fastest = medians_ms(samples)
    by_round = round_medians_ms(samples, args.calls)
    checkpoints = []
    for checkpoint, copy in sorted(copies.items()):
        label = copy.get("same_module_as", f"{checkpoint:g} min")
        measured = medians[label]
        if checkpoints:  # how many rounds ran this checkpoint slower than the one before
            before = by_round[checkpoints[-1]["module"]]
            copy["rounds_slower_than_before"] = (
                f"{sum(a > b for a, b in zip(by_round[label], before))} of {len(before)}"
            )
        estimate = copy.get("estimated_ms")
        checkpoints.append(
            {
                "minutes": checkpoint,
                "module": label,
                **{k: v for k, v in copy.items() if k != "records"},
                "measured_ms": measured,
                "x_fastest_peer": measured / peers[fastest],
                "measured_over_estimate": measured / estimate if estimate else None,
                "measured_over_in_model": (
                    measured / copy["in_model_estimate_ms"]
                    if copy.get("in_model_estimate_ms")
                    else None
                ),
                "measured_over_in_model_same_state": same_state_ratio(
                    copy, by_round[label], round_trips
                ),
            }
        )
    return {
        "model": name,
        "run": run,
        "run_id": stvm.context.run_id,  # its module saved, for bench/diagnostics/kernels_in_situ.py --fidelity
        "kind": "warm" if args.warm_from else "cold",
        "warm_records": warm_records,
        "threads": args.threads,
        "host": host,
        "peers_ms": peers,
        "fastest_peer": fastest,
        "checkpoints": checkpoints,
        "never_slower_later": all(
            later["measured_ms"] <= earlier["measured_ms"]
            for earlier, later in zip(checkpoints, checkpoints[1:])
        ),
        "round_medians_ms": by_round,
        "round_trip_ns": round_trips,
        "slow_rounds": sum(trip > SLOW_ABOVE_NS for trip in round_trips),
        "max_abs_difference_to_reference": agreement,
        "relative_error_to_reference": {
            label: difference / max(float(np.abs(reference).max()), 1e-30)
            for label, difference in agreement.items()
        },
        "stage_seconds": stvm.context.stage_durations(),
    }


def builtin_name(saved) -> str:
    """The BUILTIN name of a saved run's model (a run of a ``.tflite`` file has none)."""
    from simpletvm.models.zoo import builtin_recipe

    recipe = builtin_recipe(saved.context.model)
    for name, (model, options) in BUILTIN.items():
        if recipe and recipe[0] == model and all(recipe[1].get(k) == v for k, v in options.items()):
            return name
    raise SystemExit(f"run {saved.context.run_id}: not one of the built-in models {list(BUILTIN)}")


def retime(kept: Path, args, scratch: Path) -> dict:
    """The module a kept store's run saved (its last checkpoint), timed again with the
    peers in the same alternating rounds, outputs checked as in a run."""
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.runtime.comparison import simpletvm_runner, time_side_by_side

    run_ids = (
        sorted(p.name for p in (kept / "modules").iterdir()) if (kept / "modules").is_dir() else []
    )
    if len(run_ids) != 1:
        raise SystemExit(f"--retime {kept}: expected one saved module, found {len(run_ids)}")
    context = BenchmarkingContext("cpu", num_threads=args.threads, store=kept)
    saved = SimpleTVM(context).load(run_ids[0])
    name = builtin_name(saved)
    spec = saved.model.inputs[0]
    example = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    runners, reference = peer_runners(name, example, args.threads, scratch)
    runners["saved"] = simpletvm_runner(saved, example)
    checked_outputs(str(kept), runners, reference)
    samples = time_side_by_side(runners, args.rounds, args.calls, args.warmup)
    medians, peers, fastest = medians_ms(samples)
    return {
        "store": str(kept),
        "run_id": run_ids[0],
        "model": name,
        "peers_ms": peers,
        "fastest_peer": fastest,
        "saved_ms": medians["saved"],
        "x_fastest_peer": medians["saved"] / peers[fastest],
        "retimed_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def print_run(result: dict) -> None:
    host = result["host"]
    peers = ", ".join(f"{p} {ms:.3f} ms" for p, ms in result["peers_ms"].items())
    print(
        f"\n{result['model']} ({result['kind']}, run {result['run']}), {result['threads']} "
        f"threads, {host['cpu']} (LLVM cpu {host['llvm_cpu']}); peers: {peers}"
    )
    print(
        f"  {'minutes':>7} {'trials':>7} {'measured ms':>12} {'x ' + result['fastest_peer']:>14}"
        f" {'estimate ms':>12} {'meas/est':>9} {'tasks measured':>15} {'build s':>8}"
        f" {'in-model s':>11} {'meas/in-model':>14} {'same state':>11}"
    )
    for c in result["checkpoints"]:
        estimate = f"{c['estimated_ms']:.3f}" if c.get("estimated_ms") else "-"
        ratio = f"{c['measured_over_estimate']:.3f}" if c["measured_over_estimate"] else "-"
        in_model = f"{c['measured_over_in_model']:.3f}" if c.get("measured_over_in_model") else "-"
        same_state = c.get("measured_over_in_model_same_state")
        same_state = f"{same_state:.3f}" if same_state else "-"
        print(
            f"  {c['minutes']:>7g} {c['trials']:>7} {c['measured_ms']:>12.3f} "
            f"{c['x_fastest_peer']:>14.3f} {estimate:>12} {ratio:>9} "
            f"{c.get('tasks_measured', '-'):>15} {c['build_s']:>8} {c.get('in_model_s', '-'):>11} "
            f"{in_model:>14} {same_state:>11}"
            + (f"  (the {c['same_module_as']} module)" if c.get("same_module_as") else "")
            + ("  (round kept every incumbent)" if c.get("in_model_kept_as_a_whole") else "")
        )
    if "relative_error_to_reference" in result:
        errors = ", ".join(
            f"{label} {error:.1e}" for label, error in result["relative_error_to_reference"].items()
        )
        print(f"  relative error to the reference: {errors}")
    print(f"  never slower at a later checkpoint: {result['never_slower_later']}")
    steps = [
        f"{c['minutes']:g} min {c['rounds_slower_than_before']}"
        for c in result["checkpoints"]
        if c.get("rounds_slower_than_before")
    ]
    print(f"  rounds in which a checkpoint ran slower than the one before: {', '.join(steps)}")
    if "round_trip_ns" in result:  # runs before the probe have no state
        trips = result["round_trip_ns"]
        print(
            f"  host state: {result['slow_rounds']} of {len(trips)} rounds slow (a cache line's "
            f"round trip {min(trips)}-{max(trips)} ns; slow above {SLOW_ABOVE_NS})"
        )
        rounds = [
            f"{c['minutes']:g} min {c['in_model_round_trip_ns'][0]}-{c['in_model_round_trip_ns'][1]}"
            for c in result["checkpoints"]
            if c.get("in_model_round_trip_ns")
        ]
        print(f"  round trip (ns) before and after each in-model round: {', '.join(rounds)}")


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in results))
    figure, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.2), squeeze=False)
    for axis, model in zip(axes[0], models):
        mine = [r for r in results if r["model"] == model]
        for r in mine:
            points = r["checkpoints"]
            axis.plot(
                [c["minutes"] for c in points],
                [c["measured_ms"] for c in points],
                marker="o",
                label=f"SimpleTVM {r['kind']} run {r['run']}",
            )
        for peer in mine[0]["peers_ms"]:
            level = statistics.median(r["peers_ms"][peer] for r in mine)
            axis.axhline(level, linestyle="--", linewidth=1, color="grey")
            axis.annotate(peer, (0, level), fontsize=8, va="bottom")
        axis.set_yscale("log")
        axis.set_xlabel("minutes of autotune()")
        axis.set_ylabel("measured latency, ms (batch 1)")
        axis.set_title(Path(model).name)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mobilenetv2,resnet18")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--checkpoints", default="0,1,2,5,10,15")
    parser.add_argument("--runs", type=int, default=1, help="runs per model, one seed each")
    parser.add_argument("--first-seed", type=int, default=0, help="the first run's seed")
    parser.add_argument("--warm-from", default=None, help="stores whose records warm the run")
    parser.add_argument("--keep-stores", type=Path, default=None, help="keep each run's store")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/time_to_peers"))
    parser.add_argument(
        "--retime",
        default=None,
        help="stores --keep-stores kept: time each one's saved module with the peers again",
    )
    args = parser.parse_args()
    if args.retime:
        retime_stores(args, parser)
        return
    models = args.models.split(",")
    for name in models:
        if name.endswith(".tflite"):
            if not Path(name).is_file():
                parser.error(f"--models: no such file {name}")
        elif name not in BUILTIN:
            parser.error(f"--models: {name!r} is neither a .tflite file nor one of {list(BUILTIN)}")
    try:
        args.checkpoints = sorted({float(c) for c in args.checkpoints.split(",")})
    except ValueError:
        parser.error(f"--checkpoints: minutes separated by commas, not {args.checkpoints!r}")
    if args.checkpoints[-1] != args.minutes or args.checkpoints[0] < 0:
        parser.error("--checkpoints: from 0 up to --minutes, the last being --minutes")
    if args.warm_from:
        args.warm_from = [Path(p) for p in args.warm_from.split(",")]
        missing = [str(p) for p in args.warm_from if not p.exists()]
        if missing:
            parser.error(f"--warm-from: no such store or records file: {', '.join(missing)}")

    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    host = host_description()
    kind = "warm" if args.warm_from else "cold"
    results = []
    for name in models:
        for run in range(args.first_seed, args.first_seed + args.runs):
            scratch = Path(tempfile.mkdtemp(prefix="simpletvm-time-to-peers-"))
            try:
                results.append(one_run(name, run, args, scratch, host))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            print_run(results[-1])
            stem = args.out / f"time-to-peers-{kind}"
            stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
            plot(results, stem.with_suffix(".png"))
    print(f"\nresults: {stem}.json, {stem}.png")


def retime_stores(args, parser) -> None:
    """``--retime``: each kept store's saved module against the peers, now."""
    stores = [Path(p) for p in args.retime.split(",")]
    missing = [str(p) for p in stores if not p.is_dir()]
    if missing:
        parser.error(f"--retime: no such store: {', '.join(missing)}")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for kept in stores:
        scratch = Path(tempfile.mkdtemp(prefix="simpletvm-time-to-peers-"))
        try:
            results.append(retime(kept, args, scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        result = results[-1]
        peers = ", ".join(f"{p} {ms:.3f} ms" for p, ms in result["peers_ms"].items())
        print(
            f"{kept}: {result['model']} saved module {result['saved_ms']:.3f} ms = "
            f"{result['x_fastest_peer']:.3f}x {result['fastest_peer']} (peers: {peers})",
            flush=True,
        )
    (args.out / "retimed.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nresults: {args.out / 'retimed.json'}")


if __name__ == "__main__":
    main()
