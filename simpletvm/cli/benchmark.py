"""``simpletvm benchmark``: a model untuned, tuned and beside what runs its source, timed
side by side."""

from __future__ import annotations

import functools
from pathlib import Path

import typer

from simpletvm.cli.guard import refuse
from simpletvm.cli.options import (
    DEVICE_KEY_HELP,
    INPUT_SHAPE_HELP,
    MODEL_HELP,
    TOLERANCE_OPTION,
    TRACKER_HELP,
)
from simpletvm.cli.program import command
from simpletvm.cli.reports import answer_text, print_unchecked, tuning_verdict
from simpletvm.cli.session import model_options, remote_target, session, where
from simpletvm.cli_options import STORE_HELP, THREADS_HELP
from simpletvm.console import latency_text


@command()
def benchmark(
    model: str = typer.Argument(
        ..., metavar="MODEL", show_default=False, help=MODEL_HELP + ", or the run id of a `tune`"
    ),
    records: str = typer.Option(
        "global",
        help="records of the tuned build: global, best "
        "or a run id (a run id given as MODEL implies it)",
    ),
    input_shape: list[str] = typer.Option([], help=INPUT_SHAPE_HELP),
    image_size: int | None = typer.Option(None, help="built-in models: input size"),
    rounds: int = typer.Option(5, min=1, help="timing rounds, taken in turns"),
    calls: int = typer.Option(20, min=1, help="timed calls per round"),
    tracker: str | None = typer.Option(None, help=TRACKER_HELP + ": both builds are timed there"),
    device_key: str | None = typer.Option(None, help=DEVICE_KEY_HELP),
    store: Path | None = typer.Option(None, help=STORE_HELP),
    threads: int | None = typer.Option(None, min=1, help=THREADS_HELP),
    tolerance: float | None = TOLERANCE_OPTION,
) -> None:
    """Time a model untuned, tuned and beside TFLite or ONNX Runtime.

    Untuned, tuned, and in what runs the model's source (its own framework, TFLite for
    a Keras or TFLite model, ONNX Runtime for an ONNX one, when installed), timed side
    by side on one input: the median per call and the spread (p10-p90), each build's
    answers first checked against the model's own framework. With --tracker, the two
    builds are timed on a server of --device-key (no peers there)."""
    from simpletvm import SimpleTVM
    from simpletvm.errors import SimpleTVMError
    from simpletvm.runtime.comparison import simpletvm_runner, time_side_by_side
    from simpletvm.runtime.evaluation import random_inputs, summarize
    from simpletvm.store import RunStore

    remote = remote_target(tracker, device_key)
    console, ctx, _ = session(
        store, tracker=remote, device_key=device_key, kind="benchmark", threads=threads
    )
    options = model_options(model, input_shape, image_size)
    run_store = RunStore(store)
    tuned_run = None
    if model in run_store.run_ids():  # a tuning run: its model, its options, its records
        tuned_run = model
        model, options, records = _tuned_run(run_store, model)
    tuned_name = f"tuned ({records})"
    try:
        builds, answers = {}, {}
        for name, applied in (("untuned", None), (tuned_name, records)):
            stvm = SimpleTVM(ctx, rpc_tracker=remote)  # both builds' steps in one run
            builds[name] = stvm.from_model(model, **options).build(records=applied)
        if remote is not None:
            medians, answers = _benchmark_remotely(
                console, model, builds, tuned_name, rounds * calls, tolerance
            )
        else:
            answers = {
                name: stvm.check_answers(tolerance=tolerance) for name, stvm in builds.items()
            }
    except (SimpleTVMError, ValueError) as error:
        raise refuse(console, error) from error
    if remote is None:
        imported = builds["untuned"].model
        example = random_inputs(imported.inputs)
        runners = {name: simpletvm_runner(stvm, example[0]) for name, stvm in builds.items()}
        peer_threads = threads or builds["untuned"].target.spec.get("num-cores", 1)
        runners.update(_peer_runners(console, imported, example, peer_threads))
        samples = time_side_by_side(runners, rounds, calls, warmup=3)
        stats = {name: summarize(seconds) for name, seconds in samples.items()}
        medians = {name: found["median_ms"] for name, found in stats.items()}
        _print_medians(
            console,
            f"{model}: median and p10-p90 per call from Python (ms), "
            f"{rounds} x {calls} calls in turns",
            stats,
            tuned_name,
            answers,
        )
    _keep_benchmark(ctx, run_store, tuned_run, medians, tuned_name, answers)


def _keep_benchmark(
    ctx,
    run_store,
    tuned_run: str | None,
    medians: dict[str, float],
    tuned_name: str,
    answers: dict[str, dict],
) -> None:
    """The medians (and each build's error against the source framework) go with the run
    they are about: a tuning run given as MODEL keeps them (the benchmark makes no run
    of its own), else the benchmark's run does."""
    from simpletvm import BenchmarkingContext

    result = {
        "medians_ms": medians,
        "tuned": tuned_name,
        "tuned_median_ms": medians[tuned_name],
        "max_rel_error": {name: found["max_rel_error"] for name, found in answers.items()},
        "reference": answers[tuned_name]["reference"],
        "run_id": ctx.run_id,
    }
    if tuned_run is not None:
        tuned = BenchmarkingContext.load(tuned_run, run_store)
        tuned.results["benchmark"] = result
        tuned.save()
        ctx.discard()
        return
    ctx.results["benchmark"] = result
    ctx.status = "ok"
    ctx.save()


def _print_medians(
    console, heading: str, stats: dict[str, dict], tuned_name: str, answers: dict[str, dict]
) -> None:
    """Each build's and peer's median, its spread (p10-p90), its ratio to the tuned
    build's median and its error against the source framework, in aligned columns;
    then the verdict on tuning. The ratios and the verdict come from the numbers
    printed, so they agree with them."""
    printed = {name: latency_text(found["median_ms"]) for name, found in stats.items()}
    tuned = float(printed[tuned_name])
    rows = [
        (
            name,
            f"{median} ms",
            f"{latency_text(stats[name]['p10_ms'])}-{latency_text(stats[name]['p90_ms'])}",
            f"{float(median) / tuned:.2f}x tuned",
            answer_text(answers[name]) if name in answers else "",
        )
        for name, median in printed.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    console.print(
        f"{heading}; x tuned: over the tuned median (below 1: faster)",
        highlight=False,
        soft_wrap=True,
    )
    for row in rows:
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:4], widths[1:]))]
        console.print(f"  {'  '.join(cells)}  {row[4]}".rstrip(), highlight=False, soft_wrap=True)
    print_unchecked(console, answers[tuned_name])
    console.print(tuning_verdict(float(printed["untuned"]), tuned))


def _benchmark_remotely(
    console, model: str, builds: dict, tuned_name: str, repeat: int, tolerance: float | None
) -> tuple[dict[str, float], dict[str, dict]]:
    """Check and time each build on a server of the device key, one after the other, in
    TVM's time evaluator there (a call from here would time the network too)."""
    medians, answers, device = {}, {}, ""
    for name, stvm in builds.items():
        evaluation = stvm.evaluate(repeat=repeat, warmup=3, tolerance=tolerance).last_evaluation
        medians[name], device = evaluation["median_ms"], where(evaluation["device"])
        answers[name] = evaluation
    heading = f"{model}: median and p10-p90 of {repeat} runs on {device} (ms)"
    _print_medians(console, heading, answers, tuned_name, answers)
    return medians, answers


def _tuned_run(run_store, run_id: str) -> tuple[str, dict, str]:
    """The model source and import options a tuning run recorded, and its records."""
    from simpletvm import BenchmarkingContext

    given = dict(BenchmarkingContext.load(run_id, run_store).parameters.get("from_model", {}))
    source = given.pop("source")
    return source, {k: v for k, v in given.items() if v is not None}, run_id


def _peer_runners(console, model, example: list, threads: int) -> dict:
    """What else runs the model (its own framework, TFLite for a Keras model that came in
    through it: :func:`~simpletvm.runtime.reference.peers_for`), on the threads TVM
    uses; a line for each that cannot run here, and why."""
    from simpletvm.runtime.reference import peers_for

    found, missing = peers_for(model, threads)
    for name, why in missing.items():
        console.print(f"(no {name} timing: {why})", highlight=False, soft_wrap=True)
    return {name: functools.partial(run, example) for name, run in found.items()}
