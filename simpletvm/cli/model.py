"""``simpletvm tune``, ``compile`` and ``run``: one model at a time, in the manner of
TVM's former ``tvmc``."""

from __future__ import annotations

from pathlib import Path

import typer

from simpletvm.cli.guard import refuse
from simpletvm.cli.options import (
    DEVICE_KEY_HELP,
    INPUT_SHAPE_HELP,
    MODEL_ARGUMENT,
    TOLERANCE_OPTION,
    TRACKER_HELP,
)
from simpletvm.cli.program import command
from simpletvm.cli.reports import (
    answer_text,
    estimate_text,
    print_skipped,
    print_unchecked,
    tuning_progress,
    tuning_time,
)
from simpletvm.cli.session import model_options, remote_target, session, where
from simpletvm.cli_options import MIN_MINUTES, MINUTES_HELP, STORE_HELP, THREADS_HELP
from simpletvm.console import clock_text, make_console


@command()
def tune(
    model: str = MODEL_ARGUMENT,
    minutes: float | None = typer.Option(None, min=MIN_MINUTES, help=MINUTES_HELP),
    trials: int | None = typer.Option(
        None,
        min=1,
        help="at most this many candidates "
        "per task (default 64, no cap with --minutes or "
        "--total-trials)",
    ),
    total_trials: int | None = typer.Option(None, min=1, help="cap over all tasks"),
    input_shape: list[str] = typer.Option([], help=INPUT_SHAPE_HELP),
    image_size: int | None = typer.Option(None, help="built-in models: input size"),
    target: str = typer.Option("cpu", help="cpu or cuda"),
    store: Path | None = typer.Option(None, help=STORE_HELP),
    seed: int | None = typer.Option(None, help="search seed"),
    tracker: str | None = typer.Option(None, help=TRACKER_HELP + ": candidates are profiled there"),
    device_key: str | None = typer.Option(None, help=DEVICE_KEY_HELP),
    threads: int | None = typer.Option(None, min=1, help=THREADS_HELP),
    log_tasks: bool = typer.Option(False, "--log-tasks", help="print a line per finished task"),
) -> None:
    """Autotune a model within --minutes; prints its run id.

    Its records go to the run store under a new run id (and to the global database),
    for `simpletvm compile MODEL --records RUN_ID`. --minutes covers the whole tuning
    from the end of the import: the search and the timing inside the model after it.
    With --tracker, candidates are profiled on the tracker's servers of --device-key."""
    from simpletvm.errors import SimpleTVMError

    remote = remote_target(tracker, device_key)
    console, ctx, stvm = session(
        store, target, log_tasks, remote, device_key, kind="tune", threads=threads
    )
    if minutes is not None:
        _print_budget(console, stvm, minutes)
    try:
        stvm.from_model(model, **model_options(model, input_shape, image_size))
        ctx.status = "running"
        ctx.save()  # listed as running while it tunes
        stvm.autotune(
            trials=trials,
            total_trials=total_trials,
            minutes=minutes,
            seed=seed,
            progress=tuning_progress(console, model, minutes),
        )
    except (SimpleTVMError, ValueError) as error:
        ctx.status = "failed"
        ctx.save()
        raise refuse(console, error) from error
    ctx.status = "ok"
    ctx.save()
    summary = stvm.tuning_summary
    console.print(
        f"{summary['trials']} trials over {summary['num_tasks']} tasks in "
        f"{tuning_time(summary)} (the import before it: "
        f"{clock_text(ctx.step_durations().get('from_model', 0))}); {estimate_text(summary)}",
        soft_wrap=True,
    )
    print_skipped(console, summary)
    console.print(f"run id   {ctx.run_id}", soft_wrap=True)
    # the command to copy, on one line whatever the width (a path wrapped can't be pasted)
    console.print(
        f"next     simpletvm compile {model} --records {ctx.run_id} -o DIR",
        highlight=False,
        soft_wrap=True,
    )


def _print_budget(console, stvm, minutes: float) -> None:
    """What a --minutes budget covers, said before anything runs."""
    from simpletvm.in_model_round import InModelRound

    inside = InModelRound(stvm, minutes).due(0.0)
    console.print(
        f"budget   {clock_text(minutes * 60)} of tuning from the end of the import (not "
        f"counted): finding the tasks, the search, its closing round"
        + (" and the timing inside the model" if inside else ""),
        highlight=False,
        soft_wrap=True,
    )


@command(name="compile")
def compile_model(
    model: str = MODEL_ARGUMENT,
    output: Path = typer.Option(..., "--output", "-o", help="directory for the module"),
    records: str = typer.Option("global", help="global, best, none, or a run id"),
    input_shape: list[str] = typer.Option([], help=INPUT_SHAPE_HELP),
    image_size: int | None = typer.Option(None, help="built-in models: input size"),
    target: str = typer.Option("cpu", help="cpu or cuda"),
    store: Path | None = typer.Option(None, help=STORE_HELP),
    threads: int | None = typer.Option(None, min=1, help=THREADS_HELP),
    tolerance: float | None = TOLERANCE_OPTION,
) -> None:
    """Build a model with records, check its answers, save it.

    The answers are checked against the model's own framework on one random input; the
    module is saved as model.so + metadata.json."""
    from simpletvm.errors import SimpleTVMError

    console, ctx, stvm = session(store, target, kind="compile", threads=threads)
    untuned = records.lower() == "none"
    try:
        stvm.from_model(model, **model_options(model, input_shape, image_size))
        stvm.build(records=None if untuned else records)
        answers = (
            stvm.check_answers(tolerance=tolerance)
            if stvm.target.runs_here
            else {"max_rel_error": None, "reference": "none: the module is for another CPU"}
        )
        stvm.save(output)
    except (SimpleTVMError, ValueError) as error:
        raise refuse(console, error) from error
    ctx.status = "ok"
    ctx.save()
    checked = f", {answer_text(answers)}"
    if untuned:
        console.print(f"compiled {model} untuned (no records){checked} -> {output}")
        print_unchecked(console, answers)
        return
    build = next(s for s in ctx.steps if s["step"] == "build")
    kept = [
        f"{count} on {what}"
        for what, count in (
            ("their default schedule", build.get("tasks_on_default_in_model", 0)),
            ("an earlier record", build.get("tasks_on_earlier_record_in_model", 0)),
        )
        if count
    ]
    beaten = f" ({', '.join(kept)}: faster inside the model)" if kept else ""
    console.print(
        f"compiled {model} with {records} records: {build['tasks_with_records']} "
        f"of {build['tasks']} tasks tuned{beaten}{checked} -> {output}"
    )
    print_unchecked(console, answers)
    _warn_unmatched_records(build, records)


def _warn_unmatched_records(build: dict, records: str) -> None:
    """When none of the built model's tasks found a record: say so, and why, as far as
    the store tells."""
    from rich.text import Text

    if build["tasks_with_records"] or build.get("tasks_on_default_in_model") or not build["tasks"]:
        return
    searched = {"global": "the store", "best": "the store's best records"}.get(records, records)
    why = {
        "empty": "it holds no tuning records: tune the model first (simpletvm tune MODEL)",
        "workloads": (
            f"its {build['records_loaded']} records for this target are of other "
            "tasks: another model, or this one with another input shape"
        ),
        "target": (
            "its records are for another target or CPU ("
            + ", ".join(build.get("records_targets", []))
            + "), this build for "
            f"{build.get('target_key')}: tune on this machine, or compile where the "
            "records were measured"
        ),
    }[build.get("records_mismatch", "empty")]
    make_console(stderr=True).print(
        Text.assemble(
            ("warning:", "yellow"),
            f" none of the model's {build['tasks']} tasks has a record "
            f"in {searched}, so the module is untuned: {why}",
        ),
        highlight=False,
        soft_wrap=True,
    )


@command(name="run")
def run_module(
    module: Path = typer.Argument(..., help="a directory written by `simpletvm compile`"),
    input: list[str] = typer.Option(  # noqa: A002 - tvmc's name for it
        ...,
        "--input",
        "-i",
        help="x.npy for one input, NAME=x.npy for several",
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="write the output here (.npy; .npz for several outputs)"
    ),
    tracker: str | None = typer.Option(None, help=TRACKER_HELP + ": the module runs there"),
    device_key: str | None = typer.Option(None, help=DEVICE_KEY_HELP),
    store: Path | None = typer.Option(None, help=STORE_HELP),
    threads: int | None = typer.Option(None, min=1, help=THREADS_HELP),
) -> None:
    """Run a compiled module on inputs saved with numpy.save.

    Here or, with --tracker, on a server of --device-key. Each input must have the
    model's shape and dtype. Makes no run in the store (the module's is its run)."""
    import json

    import numpy as np

    from simpletvm.api import METADATA_FILE
    from simpletvm.errors import SimpleTVMError

    remote = remote_target(tracker, device_key)
    console, ctx, stvm = session(
        store, tracker=remote, device_key=device_key, kind="run", threads=threads
    )
    metadata_path = module / METADATA_FILE
    if not metadata_path.exists():
        raise refuse(
            console,
            FileNotFoundError(
                f"{module} holds no compiled module ({METADATA_FILE} is missing): make one with "
                "simpletvm compile MODEL -o DIR"
            ),
        )
    try:
        metadata = json.loads(metadata_path.read_text())
        named = dict(item.split("=", 1) if "=" in item else ("", item) for item in input)
        expected = [spec["name"] for spec in metadata.get("inputs", [])]
        unknown = [name for name in named if name and name not in expected]
        if unknown:
            raise SimpleTVMError(
                f"unknown input {', '.join(map(repr, unknown))}: the "
                f"model's inputs are {expected} (-i NAME=x.npy)"
            )
        arrays = {name: _load_array(path) for name, path in named.items()}
        _check_dtypes(arrays, named, metadata.get("inputs", []))
        stvm.load(metadata["run_id"], directory=module)
        result = stvm.run(arrays.get("") if list(arrays) == [""] else arrays)
    except (SimpleTVMError, ValueError, OSError) as error:
        raise refuse(console, error) from error
    ctx.discard()  # the module's run is the one to keep; running it adds none
    results = result if isinstance(result, list) else [result]
    if remote is not None:
        console.print(f"ran on {where(ctx.steps[-1]['device'])}", highlight=False)
    if output is None:
        for index, array in enumerate(results):
            console.print(
                f"output {index}: shape {array.shape}, dtype {array.dtype}, "
                f"argmax {int(array.argmax())}, first values "
                f"{np.array2string(array.ravel()[:5], precision=4)}"
            )
    elif len(results) == 1:
        np.save(output, results[0])
        console.print(f"wrote {output}")
    else:
        np.savez(output, *results)
        console.print(f"wrote {output} ({len(results)} outputs)")


def _check_dtypes(arrays: dict, paths: dict, specs: list[dict]) -> None:
    """Refuse an input file whose dtype is not the model's input's, naming the fix (a
    float64 array, numpy's default, into a float32 model)."""
    from simpletvm.errors import SimpleTVMError

    by_name = {spec["name"]: spec for spec in specs}
    for name, array in arrays.items():
        spec = by_name.get(name) or (specs[0] if specs and not name else None)
        if spec is None:
            continue  # a module without input specs: nothing to hold it to
        wanted = spec.get("dtype", "float32")
        if str(array.dtype) != wanted:
            raise SimpleTVMError(
                f"{paths[name]} holds {array.dtype}, the model's input {spec['name']!r} takes "
                f"{wanted}: save it as {wanted} (np.save(path, x.astype({wanted!r})))"
            )


def _load_array(path: str):
    """An input saved with numpy.save, or a SimpleTVMError naming what the file is not."""
    import numpy as np

    from simpletvm.errors import SimpleTVMError

    if not Path(path).is_file():
        raise SimpleTVMError(f"input file {path} does not exist")
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError):
        array = None
    if not isinstance(array, np.ndarray):
        raise SimpleTVMError(
            f"{path} is not a .npy array: save each input with numpy.save, e.g. "
            "python -c \"import numpy as np; np.save('x.npy', np.zeros((1, 224, 224, 3), "
            "'float32'))\""
        )
    return array
