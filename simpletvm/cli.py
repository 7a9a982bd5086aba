"""The ``simpletvm`` command: a quickstart, and one model at a time (tune, compile, run,
benchmark), in the manner of TVM's former ``tvmc``.

Exit codes (:class:`simpletvm.exit_codes.ExitCode`, shared with ``superb``): 0 done; 1 a
step failed on the model (TVM's frontend failing on a valid one included: one line naming
the step, the traceback in the run's log); 2
bad input (a SimpleTVM error or a usage error, naming the fix); 3 an unexpected error (a
bug: one line and the file holding its traceback); 4 a build refused, its answers too far
from the model's own framework's (WrongAnswerError); 130 stopped by Ctrl-C, the run saved
as far as it got.

Only Typer and the exit codes are imported here; SimpleTVM, TVM and numpy load when a
command needs them, so ``simpletvm --help`` is instant. Messages print without Rich
markup: an error's text or a path may hold brackets (``'simpletvm[bench]'``) that must
reach the user as written.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import os
import time
import traceback
from pathlib import Path

import typer

from simpletvm.cli_options import (
    MIN_MINUTES,
    MINUTES_HELP,
    STORE_HELP,
    THREADS_HELP,
    VERBOSE_HELP,
    flags_without_type,
)
from simpletvm.exit_codes import ExitCode, honour_ctrl_c, relay_ctrl_c

flags_without_type()
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Autotune deep-learning models with Apache TVM.",
)


@app.callback()
def _options(verbose: bool = typer.Option(False, "--verbose", help=VERBOSE_HELP)) -> None:
    if verbose:
        from simpletvm._process.native_output import VERBOSE_VARIABLE

        os.environ[VERBOSE_VARIABLE] = "1"


_active_contexts: list = []  # the BenchmarkingContext of the command running, if any


def _command(*args, **kwargs):
    """``app.command``, with errors turned into one line and their exit code; the help
    is the docstring, each paragraph one line for the terminal to wrap at its width
    (Typer keeps a docstring's line breaks: sentences broken mid-way)."""

    def register(function):
        paragraphs = inspect.cleandoc(function.__doc__ or "").split("\n\n")
        text = "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)
        return app.command(*args, help=text, **kwargs)(_guarded(function))

    return register


def _guarded(function):
    """Run a command so that no raw traceback reaches the user: a SimpleTVM error (it
    names the fix) exits 2; any other error, and a :class:`FrontendError` (TVM's frontend
    failed on a valid model: no fix of the input's), prints one line and where its
    traceback was logged (the run's log, or a file under the store): exit 1 when a step
    of the run failed on the model (the run records the step as failed), else 3 (a bug)."""

    @functools.wraps(function)
    def command(*args, **kwargs):
        from simpletvm.errors import FrontendError, SimpleTVMError

        _active_contexts.clear()
        try:
            with _native_output_to_the_log():
                return function(*args, **kwargs)
        except typer.Exit as done:
            if done.exit_code == ExitCode.BAD_INPUT:
                _discard_refused_run(done.__cause__)
            elif done.exit_code == ExitCode.WRONG_ANSWER:
                _save_failed_run()  # the build ran: its run shows what it answered
            raise
        except (typer.Abort, typer.BadParameter):
            _discard_refused_run()
            raise  # typer's own: usage errors exit 2 with its message
        except KeyboardInterrupt:
            _save_interrupted_run()
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        except FrontendError as error:
            raise _failure(error, function.__name__, kwargs.get("store")) from None
        except SimpleTVMError as error:
            refusal = _refuse(_console(stderr=True), error)
            if refusal.exit_code == ExitCode.BAD_INPUT:
                _discard_refused_run(error)
            else:
                _save_failed_run()
            raise refusal from error
        except Exception as error:  # noqa: BLE001 - the CLI edge: a message, not a traceback
            raise _failure(error, function.__name__, kwargs.get("store")) from None

    return command


def _failure(error: Exception, command: str, store: Path | None) -> typer.Exit:
    """Report an error that is no fault of the input: log its traceback, keep the run as
    failed, print one line; exit 1 when a step failed on the model, else 3 (a bug)."""
    from simpletvm.errors import SimpleTVMError

    where = _log_traceback(error, command, store)
    gist = (
        str(error)  # written for the user, whole
        if isinstance(error, SimpleTVMError)
        else f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"
    )
    step = _failed_step()
    _save_failed_run()
    if step is None:
        _print_error(
            _console(stderr=True),
            f"unexpected {gist} (the full traceback is "
            f"in {where}; please report it with that file)",
        )
        return typer.Exit(ExitCode.UNEXPECTED)
    _print_error(
        _console(stderr=True),
        f"the {step} step failed on the model: {gist} (the full traceback is in {where})",
    )
    return typer.Exit(ExitCode.FAILED)


@contextlib.contextmanager
def _native_output_to_the_log():
    """Native libraries' lines (TensorFlow's absl and oneDNN notices, TFLite's XNNPACK
    delegate, TVM's warnings) written anywhere in the command go to its run's log, not
    the terminal, unless --verbose: they are caught in a file for the command's length
    and appended to the log of the run it made (dropped if it kept none)."""
    import tempfile

    from simpletvm._process.native_output import redirected, verbose

    if verbose():
        yield
        return
    handle, caught = tempfile.mkstemp(prefix="simpletvm-native-", suffix=".log")
    os.close(handle)
    try:
        with redirected(caught, keep_python=True):
            try:
                yield
            except BaseException as error:
                _let_go(error)
                raise
    finally:
        text = Path(caught).read_bytes()
        Path(caught).unlink(missing_ok=True)
        runs = [ctx for ctx in _active_contexts[-1:] if ctx.run_dir.exists()]
        if text.strip() and runs:
            with open(runs[0].store.log_path(runs[0].run_id), "ab") as log:
                log.write(text)


def _let_go(error: BaseException) -> None:
    """Free what the frames of a failed call held, while native output is still caught:
    a converter that gave up leaves objects whose destructors print (TVM's
    ``BlockBuilder destroyed with remaining blocks!``), at exit otherwise, on the
    terminal. The traceback keeps its lines for the log."""
    import gc

    seen = error
    while seen is not None:
        traceback.clear_frames(seen.__traceback__)
        seen = seen.__cause__ or seen.__context__
    gc.collect()


def _discard_refused_run(error: BaseException | None = None) -> None:
    """A command refused its input (exit 2): its run keeps nothing worth listing, unless
    it measured tuning candidates already (their records are in the store, under it), or
    its import read the model and failed on it: that run stays, failed, its log holding
    what the converters printed and the traceback."""
    for ctx in _active_contexts:
        if _import_failed(ctx):
            ctx.status = "failed"
            if error is not None:
                ctx.logger.error("the import failed", exc_info=error)
            ctx.save()
            _console(stderr=True).print(
                f"(what the import did, its traceback included: {ctx.store.log_path(ctx.run_id)})",
                highlight=False,
                soft_wrap=True,
            )
        elif not ctx.stages and "module" not in ctx.artifacts:
            ctx.discard()


def _import_failed(ctx) -> bool:
    """The run's import step failed on a model it found (not on a path naming none)."""
    if not any(s["step"] == "from_model" and s["status"] == "error" for s in ctx.steps):
        return False
    from simpletvm.models import detect_format

    try:
        detect_format(ctx.parameters.get("from_model", {}).get("source", ""))
    except Exception:  # noqa: BLE001 - no model there: nothing was imported
        return False
    return True


def _save_failed_run() -> None:
    """A step failed, or the command itself: the run stays, listed as failed, its log
    holding the traceback."""
    for ctx in _active_contexts:
        ctx.status = "failed"
        try:
            ctx.save()
        except Exception:  # noqa: BLE001 - the error being reported matters more
            pass


def _failed_step() -> str | None:
    """The step the command's run recorded as failed when the error left it, if any: an
    error raised while a step worked on the model is that step's failure, one raised
    anywhere else a bug of the command's own."""
    if not _active_contexts or not _active_contexts[-1].steps:
        return None
    last = _active_contexts[-1].steps[-1]
    return last["step"] if last["status"] == "error" else None


def _save_interrupted_run() -> None:
    """Ctrl-C: keep the command's run (its records are in the store already) and say so."""
    console = _console(stderr=True)
    if not _active_contexts:
        console.print("interrupted")
        return
    ctx = _active_contexts[-1]
    ctx.status = "interrupted"
    ctx.logger.info("interrupted by the user")
    console.print(
        f"interrupted: run {ctx.run_id} saved as far as it got ({ctx.save()}); "
        "the records it measured are in the store",
        highlight=False,
        soft_wrap=True,
    )


def _console(stderr: bool = False):
    """A console that prints text as written (no Rich markup); a table or a ``Text``
    carries its own styles."""
    from rich.console import Console

    return Console(stderr=stderr, markup=False)


def _print_error(console, message: str) -> None:
    """``error: MESSAGE`` on one line, the message as written (paths stay unbroken)."""
    from rich.text import Text

    console.print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)


def _log_traceback(error: Exception, command: str, store: Path | None) -> Path:
    """Write the error's traceback to the run's log when the command has a run, else to
    ``<store>/errors/<time>-<command>.log``; return the file."""
    if _active_contexts:
        ctx = _active_contexts[-1]
        try:
            ctx.logger.error("unexpected error in `simpletvm %s`", command, exc_info=error)
            return ctx.store.log_path(ctx.run_id)
        except Exception:  # noqa: BLE001 - the run's log is unusable: fall back to a file
            pass
    from simpletvm.store import RunStore

    directory = RunStore(store).root / "errors"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{time.strftime('%Y%m%d-%H%M%S')}-{command}.log"
    path.write_text("".join(traceback.format_exception(error)), encoding="utf-8")
    return path


@_command()
def quickstart(
    model: str = typer.Option(
        "mobilenetv2", help="built-in model: mobilenet, mobilenetv2, resnet18, resnet50"
    ),
    image_size: int = typer.Option(96, help="input height and width"),
    alpha: float | None = typer.Option(0.35, help="width multiplier (MobileNets only)"),
    minutes: float = typer.Option(5.0, min=MIN_MINUTES, help=MINUTES_HELP),
    trials: int | None = typer.Option(
        None,
        min=1,
        help="at most this many measured candidates per task (default: no cap within the minutes)",
    ),
    store: Path | None = typer.Option(None, help=STORE_HELP),
    seed: int = typer.Option(0, help="seed for weights and search"),
    threads: int | None = typer.Option(None, min=1, help=THREADS_HELP),
) -> None:
    """Tune a built-in model and time it against untuned and TFLite.

    Imports a built-in model, measures it untuned, autotunes it, builds, saves and
    measures it again, on this machine's CPU; then times it side by side with TFLite
    (XNNPACK) on the same input when TensorFlow is installed. Prints where the run's
    results are."""
    from rich.logging import RichHandler
    from rich.table import Table

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.errors import SimpleTVMError

    console = _console()
    ctx = BenchmarkingContext("cpu", store=store, num_threads=threads)
    ctx.kind = "quickstart"
    _active_contexts.append(ctx)
    handler = RichHandler(console=console, show_path=False, show_time=False)
    handler.setLevel(logging.INFO)
    # the tuning's progress line tells what the per-task lines would (they stay in the log)
    handler.addFilter(lambda record: not getattr(record, "tuning_task", False))
    ctx.logger.addHandler(handler)
    options = {"image_size": image_size, "seed": seed}
    if alpha is not None and "mobilenet" in model:
        options["alpha"] = alpha
    stvm = SimpleTVM(ctx)
    try:
        stvm.from_model(model, **options)
        ctx.status = "running"
        ctx.save()  # listed as running while it works
        untuned = stvm.build(records=None).evaluate().last_evaluation
        untuned_module = _untuned_runner(stvm, options)  # kept across the rebuild
        stvm.autotune(
            trials=trials,
            minutes=minutes,
            seed=seed,
            progress=_tuning_progress(console, model, minutes),
        )
        tuned = stvm.build(records="run").save().evaluate().last_evaluation
    except (SimpleTVMError, ValueError) as error:
        ctx.status = "failed"
        ctx.save()
        raise _refuse(console, error) from error
    ctx.status = "ok"
    context_path = ctx.save()
    summary = stvm.tuning_summary
    table = Table(title=f"{model} on {ctx.target_spec.get('mcpu')} ({ctx.host['cpu_model']})")
    checked = tuned["max_rel_error"] is not None
    error_column = f"rel. error vs {tuned['reference']}" if checked else "rel. error"
    for column in ("build", "median ms", "mean ms", "p90 ms", error_column):
        table.add_column(column, justify="right")
    for name, evaluation in (("untuned", untuned), ("tuned", tuned)):
        error = evaluation["max_rel_error"]
        table.add_row(
            name,
            *(_ms(evaluation[key]) for key in ("median_ms", "mean_ms", "p90_ms")),
            "-" if error is None else f"{error:.1e}",
        )
    console.print(table)
    _print_unchecked(console, tuned)
    verdict = tuning_verdict(float(_ms(untuned["median_ms"])), float(_ms(tuned["median_ms"])))
    console.print(
        f"{verdict} (median) after {summary['trials']} trials over {summary['num_tasks']} "
        f"tasks in {_tuning_time(summary)}; {_estimate_text(summary)}"
    )
    _print_skipped(console, summary)
    _compare_with_tflite(console, stvm, model, options, untuned_module)
    console.print(f"run id   {ctx.run_id}", soft_wrap=True)
    console.print(f"context  {context_path}", soft_wrap=True)
    console.print(f"module   {ctx.artifacts.get('module')}", soft_wrap=True)
    console.print(f"log      {ctx.store.log_path(ctx.run_id)}", soft_wrap=True)


def tuning_verdict(untuned_ms: float, tuned_ms: float) -> str:
    """What tuning did to a latency, as a factor of at least 1 and its direction: "tuning
    made it 1.26x faster than untuned", "... 1.26x slower ...", or "as fast as" when the
    factor rounds to 1.00. Give it the latencies as printed, so that a reader who checks
    the verdict against them finds it right."""
    factor = max(untuned_ms, tuned_ms) / min(untuned_ms, tuned_ms)
    if f"{factor:.2f}" == "1.00":
        return "tuning made it as fast as untuned"
    direction = "faster" if tuned_ms < untuned_ms else "slower"
    return f"tuning made it {factor:.2f}x {direction} than untuned"


def _ms(milliseconds: float) -> str:
    """A latency in ms, to at least four significant digits (three decimals from 1 ms up):
    verdicts are computed from the printed numbers, and a 0.012 ms model needs them."""
    decimals = 3
    if 0 < milliseconds < 1:
        decimals = 3 - math.floor(math.log10(milliseconds))
    return f"{milliseconds:.{decimals}f}"


def _estimate_text(summary: dict) -> str:
    """The tuning estimate: timed inside the model when autotune did, else from its
    kernels timed alone (and the search's own when the closing round changed it)."""
    text = f"estimate {summary['estimated_latency_s'] * 1e3:.3f} ms"
    if summary.get("in_model_latency_s"):
        text = (
            f"estimate {summary['in_model_latency_s'] * 1e3:.3f} ms, timed inside the model "
            f"(its kernels timed alone: {summary['estimated_latency_s'] * 1e3:.3f} ms)"
        )
    elif summary["remeasured"]:
        text += (
            f" (the search's {summary['search_estimated_latency_s'] * 1e3:.3f} ms before "
            f"its best {summary['remeasured']} records were timed again)"
        )
    return text


def _print_skipped(console, summary: dict) -> None:
    from rich.text import Text

    for skipped in summary.get("skipped_tasks", []):
        console.print(
            Text.assemble(
                ("skipped", "yellow"),
                f" {skipped['task']} (keeps TVM's default schedule): {skipped['error']}",
            ),
            highlight=False,
        )


# the quickstart's comparison: 1000 calls per side and thread count in 20 turns, about a
# second in all (100 calls in 5 turns were over in a tenth of one: a short stall of the
# shared host moved a median by several percent)
COMPARISON_ROUNDS = 20
COMPARISON_CALLS = 50


def _example(options: dict):
    import numpy as np

    size = options["image_size"]
    return np.random.default_rng(0).standard_normal((1, size, size, 3)).astype("float32")


def _untuned_runner(stvm, options: dict):
    """The built module's entry on the quickstart's input; it keeps the module it was
    made from when ``stvm`` builds again."""
    from simpletvm.runtime.comparison import simpletvm_runner

    return simpletvm_runner(stvm, _example(options))


def _compare_with_tflite(console, stvm, model: str, options: dict, untuned) -> None:
    """Time the tuned module, the ``untuned`` one and TFLite (XNNPACK) on one input, in
    turns, from Python: what a user's inference loop sees of either. Each runs on every
    core and on one (the modules only on their count when ``--threads`` pins one), and
    the comparison takes each one's faster count."""
    import numpy as np

    from simpletvm.models.zoo import builtin_tflite
    from simpletvm.runtime.comparison import (
        at_thread_counts,
        simpletvm_runner,
        tflite_runners,
        thread_counts,
        time_side_by_side,
    )

    example = _example(options)
    try:
        tflite = tflite_runners(
            builtin_tflite(model, stvm.store.zoo_dir, **options), example, stvm.target.host_cores()
        )
    except ImportError:
        console.print("TFLite is not installed here: no comparison")
        return
    modules = {"SimpleTVM": simpletvm_runner(stvm, example), "SimpleTVM untuned": untuned}
    with at_thread_counts(modules, thread_counts(stvm)) as ours:
        sides = {**ours, "TFLite (XNNPACK)": tflite}
        runners = {
            (side, count): infer
            for side, by_count in sides.items()
            for count, infer in by_count.items()
        }
        samples = time_side_by_side(
            runners, rounds=COMPARISON_ROUNDS, calls=COMPARISON_CALLS, warmup=5
        )
    medians = {key: float(np.median(values)) * 1e3 for key, values in samples.items()}
    fastest = {
        side: min(medians[side, count] for count in by_count) for side, by_count in sides.items()
    }
    timings = "; ".join(
        f"{side} "
        + ", ".join(f"{medians[side, count]:.3f} ms on {_threads(count)}" for count in by_count)
        for side, by_count in sides.items()
    )
    # the table's medians were timed minutes apart, these in the same rounds
    tuned_over_untuned = fastest["SimpleTVM"] / fastest["SimpleTVM untuned"]
    console.print(
        f"side by side on one input (median per call from Python): {timings}. "
        f"Each on its faster count: {_against_tflite('SimpleTVM', fastest)}; "
        f"{_against_tflite('SimpleTVM untuned', fastest)}; SimpleTVM / SimpleTVM untuned "
        f"{tuned_over_untuned:.2f}x in the same rounds (the table's medians were timed "
        "minutes apart, as the host's speed moved)"
    )


def _against_tflite(side: str, fastest: dict[str, float]) -> str:
    ratio = f"{fastest[side] / fastest['TFLite (XNNPACK)']:.2f}"  # the verdict reads it as printed
    verdict = "as fast" if ratio == "1.00" else "faster" if float(ratio) < 1 else "slower"
    return f"{side} / TFLite {ratio}x, {side} is {verdict}"


def _threads(count: int) -> str:
    return f"{count} thread" + ("" if count == 1 else "s")


HIDDEN_KINDS = ("run",)  # runs `simpletvm runs` lists with --all only


@_command()
def runs(
    store: Path | None = typer.Option(None, help=STORE_HELP),
    all_runs: bool = typer.Option(
        False,
        "--all",
        help="include runs that recorded nothing and runs of saved modules "
        "(`simpletvm run` that failed)",
    ),
    json_output: bool = typer.Option(False, "--json", help="print the list as JSON"),
    prune: bool = typer.Option(
        False, "--prune", help="remove failed and empty runs, after a confirmation"
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="prune without asking"),
) -> None:
    """List the runs in the store.

    Each run's id, kind (the command that made it), status, model, latency (the
    evaluation's median, or a benchmark's tuned median) and date, oldest first. Runs
    that recorded nothing (a context made in Python and never saved) are listed with
    --all only, after the others."""
    import json

    from simpletvm.context import describe_run
    from simpletvm.store import RunStore

    run_store = RunStore(store)
    listed = [describe_run(run_store, run_id) for run_id in run_store.run_ids()]
    listed.sort(key=lambda row: (row["status"] == "empty", row["created_at"] or ""))
    if prune:
        _prune(run_store, listed, yes)
        return
    hidden = []
    if not all_runs:
        hidden = [r for r in listed if r["kind"] in HIDDEN_KINDS or r["status"] == "empty"]
        listed = [row for row in listed if row not in hidden]
    if json_output:
        print(json.dumps(listed, indent=2))
        return
    _print_runs(run_store, listed)
    empty = sum(row["status"] == "empty" for row in hidden)
    unlisted = [
        f"{count} {what}"
        for count, what in (
            (empty, "that recorded nothing (--prune removes them)"),
            (len(hidden) - empty, "of saved modules"),
        )
        if count
    ]
    if unlisted:
        _console().print(f"not listed: {'; '.join(unlisted)}; --all lists them", highlight=False)


def _print_runs(run_store, rows: list[dict]) -> None:
    """The runs, one a line, their ids never cut: a table on a terminal wide enough for
    it (other columns fold), else plain columns (a pipe, a file, a narrow terminal)."""
    from datetime import datetime

    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = _console()
    header = ("run id", "kind", "status", "model", "latency", "date")
    lines = []
    for row in rows:
        created = row["created_at"] or ""
        if created:
            created = datetime.fromisoformat(created).astimezone().strftime("%Y-%m-%d %H:%M")
        model = row["model"] or ""
        if model and Path(model).suffix:
            model = Path(model).name  # a file: its name (the path is in context.json)
        latency = f"{_ms(row['latency_ms'])} ms" if row["latency_ms"] else ""
        lines.append((row["run_id"], row["kind"] or "", row["status"], model, latency, created))
    console.print(f"runs in {run_store.root}", highlight=False, soft_wrap=True)
    if not rows:
        console.print("none yet: simpletvm quickstart, or simpletvm tune MODEL")
        return
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    if not console.is_terminal or console.width < sum(widths) + 2 * len(widths):
        for line in [header, *lines]:
            print(
                "  ".join(
                    f"{cell:>{w}}" if i == 4 else f"{cell:<{w}}"
                    for i, (cell, w) in enumerate(zip(line, widths))
                ).rstrip()
            )
        return
    styles = {"ok": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run id", no_wrap=True, min_width=32)
    for column in header[1:]:
        table.add_column(
            column, overflow="fold", justify="right" if column == "latency" else "left"
        )
    for line in lines:
        table.add_row(line[0], line[1], Text(line[2], style=styles.get(line[2], "")), *line[3:])
    console.print(table)


def _prune(run_store, rows: list[dict], yes: bool) -> None:
    """Remove failed and empty runs, naming each, after a confirmation."""
    import shutil

    doomed = [row for row in rows if row["status"] in ("failed", "empty")]
    console = _console()
    if not doomed:
        console.print("nothing to prune: no failed or empty runs")
        return
    for row in doomed:
        console.print(
            f"  {row['run_id']}  {row['status']:<7} {row['kind'] or ''} {row['model'] or ''}",
            highlight=False,
        )
    if not yes and not typer.confirm(f"remove these {len(doomed)} runs?", default=False):
        console.print("removed none")
        return
    for row in doomed:
        shutil.rmtree(run_store.run_dir(row["run_id"]), ignore_errors=True)
        shutil.rmtree(run_store.module_dir(row["run_id"]), ignore_errors=True)
    console.print(f"removed {len(doomed)} runs")


# ---- one model at a time -----------------------------------------------------------------
MODEL_HELP = (
    "a model file (.onnx, .tflite, .pb, .keras, .h5), a SavedModel directory, a "
    "TF Hub handle or a built-in name (mobilenet, mobilenetv2, resnet18, resnet50)"
)
MODEL_ARGUMENT = typer.Argument(..., metavar="MODEL", help=MODEL_HELP, show_default=False)
INPUT_SHAPE_HELP = (
    "the sizes of an input's unknown dimensions, its fixed ones as the model "
    "has them: NAME:1,224,224,3 or, for one input, 1,224,224,3 (repeatable)"
)
TRACKER_HELP = "HOST:PORT of a TVM RPC tracker whose servers of --device-key are the target"
TOLERANCE_OPTION = typer.Option(
    None,
    help="the largest relative error of a build's outputs against the model's own framework "
    "(default: 1e-3 for float32, 1e-2 for float16, one step for quantized outputs); "
    "a build over it is refused (exit 4)",
)
DEVICE_KEY_HELP = "the key the target device's RPC servers register under (with --tracker)"


def _remote(tracker: str | None, device_key: str | None) -> tuple[str, int] | None:
    """``--tracker HOST:PORT --device-key KEY`` -> ``(host, port)`` once the tracker is
    reached and has a server of KEY; None without ``--tracker``. Exits 2 naming the fix."""
    if tracker is None:
        if device_key is not None:
            raise typer.BadParameter(
                "a device key needs --tracker HOST:PORT, the RPC tracker its servers register with",
                param_hint="--device-key",
            )
        return None
    host, _, port = tracker.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter(
            f"{tracker!r} is not HOST:PORT (e.g. 127.0.0.1:9190)", param_hint="--tracker"
        )
    if not device_key:
        raise typer.BadParameter(
            "give --device-key KEY, the key the target's RPC servers "
            "register under (python -m tvm.exec.query_rpc_tracker "
            f"--host {host} --port {port} lists them)",
            param_hint="--device-key",
        )
    from simpletvm.errors import SimpleTVMError
    from simpletvm.remote.rpc import require_servers

    try:
        require_servers(host, int(port), device_key)
    except SimpleTVMError as error:
        message = str(error).replace("or leave rpc_tracker unset", "or leave out --tracker")
        raise _refuse(_console(stderr=True), SimpleTVMError(message)) from error
    return host, int(port)


def _where(device: dict) -> str:
    """Where a step ran, from its ``device`` record."""
    if device.get("runner") != "rpc":
        return "this machine"
    host, port = device["server"]
    return f"RPC server {host}:{port} (key {device['device_key']})"


def _input_shapes(values: list[str]) -> dict[str, list[int]] | None:
    """``["x:1,3,32,32"]`` -> ``{"x": [1, 3, 32, 32]}``; ``["1,3,32,32"]`` -> ``{"": ...}``."""
    shapes = {}
    for value in values:
        name, _, dims = value.rpartition(":")
        try:
            shapes[name] = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()]
        except ValueError:
            raise typer.BadParameter(
                f"{value!r} is not NAME:1,224,224,3 or 1,224,224,3", param_hint="--input-shape"
            ) from None
    if "" in shapes and len(shapes) > 1:
        raise typer.BadParameter(
            "give every shape a NAME: when there are several", param_hint="--input-shape"
        )
    return shapes or None


def _model_options(model: str, input_shape: list[str], image_size: int | None) -> dict:
    options: dict = {}
    if image_size is not None:
        from simpletvm.models import detect_format

        try:
            fmt = detect_format(model)
        except Exception:  # noqa: BLE001 - the import names what is wrong with MODEL
            fmt = None
        if fmt is not None and fmt != "builtin":
            raise typer.BadParameter(
                f"applies to built-in models only (mobilenet, "
                f"mobilenetv2, resnet18, resnet50); {model} is a {fmt} "
                "model: leave --image-size out (--input-shape sets "
                "its unknown dimensions)",
                param_hint="--image-size",
            )
    shapes = _input_shapes(input_shape)
    if shapes:
        options["input_shapes"] = shapes.get("") if list(shapes) == [""] else shapes
    if image_size is not None:
        options["image_size"] = image_size
    return options


def _session(
    store: Path | None,
    target: str = "cpu",
    log_tasks: bool = False,
    tracker: tuple[str, int] | None = None,
    device_key: str | None = None,
    *,
    kind: str,
    threads: int | None = None,
):
    """A console, the command's run (of ``kind``: the command's name) and its SimpleTVM."""
    from rich.logging import RichHandler

    from simpletvm import BenchmarkingContext, SimpleTVM

    console = _console()
    ctx = BenchmarkingContext(target, store=store, device_key=device_key, num_threads=threads)
    ctx.kind = kind
    _active_contexts.append(ctx)
    if log_tasks:
        handler = RichHandler(console=console, show_path=False, show_time=False)
        handler.setLevel(logging.INFO)
        ctx.logger.addHandler(handler)
    return console, ctx, SimpleTVM(ctx, rpc_tracker=tracker)


def _refuse(console, error: Exception) -> typer.Exit:
    """Print a SimpleTVM error (it names the fix) and give its exit code: a build with
    wrong answers its own, any other the bad-input one. A :class:`FrontendError` (no
    fault of the input) is raised again instead, for :func:`_guarded` to report as the
    failure of the step it stopped."""
    from simpletvm.errors import FrontendError, WrongAnswerError

    if isinstance(error, FrontendError):
        raise error
    _print_error(console, str(error))
    if isinstance(error, WrongAnswerError):
        return typer.Exit(ExitCode.WRONG_ANSWER)
    return typer.Exit(ExitCode.BAD_INPUT)


def _answer_text(answers: dict) -> str:
    """A build's error against its source framework, as printed beside its latency."""
    if answers.get("max_rel_error") is None:
        return "answers not checked"
    return f"rel. error {answers['max_rel_error']:.1e} vs {answers['reference']}"


def _print_unchecked(console, answers: dict) -> None:
    """Why a build's answers were not compared with its source framework's, if they were
    not."""
    if answers.get("max_rel_error") is None:
        why = answers["reference"].removeprefix("none: ")
        console.print(f"(answers not checked: {why})", highlight=False, soft_wrap=True)


def _print_budget(console, stvm, minutes: float) -> None:
    """What a --minutes budget covers, said before anything runs."""
    inside = stvm.in_model_due(None, minutes, 0.0)
    console.print(
        f"budget   {_clock(minutes * 60)} of tuning from the end of the import (not "
        f"counted): finding the tasks, the search, its closing round"
        + (" and the timing inside the model" if inside else ""),
        highlight=False,
        soft_wrap=True,
    )


def _clock(seconds: float) -> str:
    from simpletvm.progress import clock_text

    return clock_text(seconds)


def _tuning_time(summary: dict) -> str:
    """autotune()'s whole wall time, the round inside the model included."""
    return _clock(sum(summary["spent_s"].values()))


def _tuning_progress(console, model: str, minutes: float | None):
    """The tuning job's progress on ``console`` (:mod:`simpletvm.progress`, as
    ``autotune(progress=True)`` shows it): a live line on a terminal, plain whole lines
    now and then in a pipe or a log."""
    from simpletvm.progress import TuningProgress

    return TuningProgress(Path(model).name or model, minutes, console=console)


@_command()
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

    remote = _remote(tracker, device_key)
    console, ctx, stvm = _session(
        store, target, log_tasks, remote, device_key, kind="tune", threads=threads
    )
    if minutes is not None:
        _print_budget(console, stvm, minutes)
    try:
        stvm.from_model(model, **_model_options(model, input_shape, image_size))
        ctx.status = "running"
        ctx.save()  # listed as running while it tunes
        stvm.autotune(
            trials=trials,
            total_trials=total_trials,
            minutes=minutes,
            seed=seed,
            progress=_tuning_progress(console, model, minutes),
        )
    except (SimpleTVMError, ValueError) as error:
        ctx.status = "failed"
        ctx.save()
        raise _refuse(console, error) from error
    ctx.status = "ok"
    ctx.save()
    summary = stvm.tuning_summary
    console.print(
        f"{summary['trials']} trials over {summary['num_tasks']} tasks in "
        f"{_tuning_time(summary)} (the import before it: "
        f"{_clock(ctx.step_durations().get('from_model', 0))}); {_estimate_text(summary)}",
        soft_wrap=True,
    )
    _print_skipped(console, summary)
    console.print(f"run id   {ctx.run_id}", soft_wrap=True)
    # the command to copy, on one line whatever the width (a path wrapped can't be pasted)
    console.print(
        f"next     simpletvm compile {model} --records {ctx.run_id} -o DIR",
        highlight=False,
        soft_wrap=True,
    )


@_command(name="compile")
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

    console, ctx, stvm = _session(store, target, kind="compile", threads=threads)
    untuned = records.lower() == "none"
    try:
        stvm.from_model(model, **_model_options(model, input_shape, image_size))
        stvm.build(records=None if untuned else records)
        answers = (
            stvm.check_answers(tolerance=tolerance)
            if stvm.target.runs_here
            else {"max_rel_error": None, "reference": "none: the module is for another CPU"}
        )
        stvm.save(output)
    except (SimpleTVMError, ValueError) as error:
        raise _refuse(console, error) from error
    ctx.status = "ok"
    ctx.save()
    checked = f", {_answer_text(answers)}"
    if untuned:
        console.print(f"compiled {model} untuned (no records){checked} -> {output}")
        _print_unchecked(console, answers)
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
    _print_unchecked(console, answers)
    _warn_unmatched_records(build, records)


def _warn_unmatched_records(build: dict, records: str) -> None:
    """When none of the built model's tasks found a record: say so, and why, as far as
    the store tells."""
    from rich.text import Text

    if build["tasks_with_records"] or build.get("tasks_on_default_in_model") or not build["tasks"]:
        return
    where = {"global": "the store", "best": "the store's best records"}.get(records, records)
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
    _console(stderr=True).print(
        Text.assemble(
            ("warning:", "yellow"),
            f" none of the model's {build['tasks']} tasks has a record "
            f"in {where}, so the module is untuned: {why}",
        ),
        highlight=False,
        soft_wrap=True,
    )


@_command(name="run")
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

    remote = _remote(tracker, device_key)
    console, ctx, stvm = _session(
        store, tracker=remote, device_key=device_key, kind="run", threads=threads
    )
    metadata_path = module / METADATA_FILE
    if not metadata_path.exists():
        raise _refuse(
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
        raise _refuse(console, error) from error
    ctx.discard()  # the module's run is the one to keep; running it adds none
    results = result if isinstance(result, list) else [result]
    if remote is not None:
        console.print(f"ran on {_where(ctx.steps[-1]['device'])}", highlight=False)
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


@_command()
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

    remote = _remote(tracker, device_key)
    console, ctx, _ = _session(
        store, tracker=remote, device_key=device_key, kind="benchmark", threads=threads
    )
    options = _model_options(model, input_shape, image_size)
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
        raise _refuse(console, error) from error
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
    printed = {name: _ms(found["median_ms"]) for name, found in stats.items()}
    tuned = float(printed[tuned_name])
    rows = [
        (
            name,
            f"{median} ms",
            f"{_ms(stats[name]['p10_ms'])}-{_ms(stats[name]['p90_ms'])}",
            f"{float(median) / tuned:.2f}x tuned",
            _answer_text(answers[name]) if name in answers else "",
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
    _print_unchecked(console, answers[tuned_name])
    console.print(tuning_verdict(float(printed["untuned"]), tuned))


def _benchmark_remotely(
    console, model: str, builds: dict, tuned_name: str, repeat: int, tolerance: float | None
) -> tuple[dict[str, float], dict[str, dict]]:
    """Check and time each build on a server of the device key, one after the other, in
    TVM's time evaluator there (a call from here would time the network too)."""
    medians, answers, where = {}, {}, ""
    for name, stvm in builds.items():
        evaluation = stvm.evaluate(repeat=repeat, warmup=3, tolerance=tolerance).last_evaluation
        medians[name], where = evaluation["median_ms"], _where(evaluation["device"])
        answers[name] = evaluation
    heading = f"{model}: median and p10-p90 of {repeat} runs on {where} (ms)"
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


# ---- the tuning service: `simpletvm serve/submit/jobs/fetch` -----------------------
# They live in the service package, which sits above simpletvm; each command hands its
# arguments to the service's own CLI, imported only when the command runs.
def _service_command(name: str, summary: str) -> None:
    @app.command(
        name,
        help=summary,
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def command(ctx: typer.Context) -> None:
        from service.cli import run

        run([name, *ctx.args], prog_name="simpletvm")


for _name, _summary in (
    ("serve", "Start a tuning service for many users (see --help)."),
    ("submit", "Submit a model to a tuning service (see --help)."),
    ("jobs", "List your jobs on a tuning service."),
    ("fetch", "Download a done job's module from a tuning service."),
):
    _service_command(_name, _summary)


def main() -> None:
    """The ``simpletvm`` program. Ctrl-C stops it even when it was started with SIGINT
    ignored, as background shells and test runners start programs (see honour_ctrl_c)."""
    honour_ctrl_c()
    relay_ctrl_c()
    app()


if __name__ == "__main__":
    main()
