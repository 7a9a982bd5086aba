"""How a ``simpletvm`` command ends: its exit code, an error as one line (its traceback in
the run's log), and its run kept, kept as failed or interrupted, or discarded.

Exit codes (:class:`simpletvm.exit_codes.ExitCode`, shared with ``superb``): 0 done; 1 a
step failed on the model (TVM's frontend failing on a valid one included: one line naming
the step, the traceback in the run's log); 2 bad input (a SimpleTVM error or a usage
error, naming the fix); 3 an unexpected error (a bug: one line and the file holding its
traceback); 4 a build refused, its answers too far from the model's own framework's
(WrongAnswerError); 130 stopped by Ctrl-C, the run saved as far as it got.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import traceback
from pathlib import Path

import typer

from simpletvm.console import log_traceback, make_console, print_error, traceback_text
from simpletvm.exit_codes import ExitCode

# the BenchmarkingContext of the command running, if any: a command appends the run it
# makes, and its ending saves or discards it
active_contexts: list = []


def guarded(function):
    """Run a command so that no raw traceback reaches the user: a SimpleTVM error (it
    names the fix) exits 2; any other error, and a :class:`FrontendError` (TVM's frontend
    failed on a valid model: no fix of the input's), prints one line and where its
    traceback was logged (the run's log, or a file under the store): exit 1 when a step
    of the run failed on the model (the run records the step as failed), else 3 (a bug)."""

    @functools.wraps(function)
    def command(*args, **kwargs):
        from simpletvm.errors import FrontendError, SimpleTVMError

        active_contexts.clear()
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
            refusal = refuse(make_console(stderr=True), error)
            if refusal.exit_code == ExitCode.BAD_INPUT:
                _discard_refused_run(error)
            else:
                _save_failed_run()
            raise refusal from error
        except Exception as error:  # noqa: BLE001 - the CLI edge: a message, not a traceback
            raise _failure(error, function.__name__, kwargs.get("store")) from None

    return command


def refuse(console, error: Exception) -> typer.Exit:
    """Print a SimpleTVM error (it names the fix) and give its exit code: a build with
    wrong answers its own, any other the bad-input one. A :class:`FrontendError` (no
    fault of the input) is raised again instead, for :func:`guarded` to report as the
    failure of the step it stopped."""
    from simpletvm.errors import FrontendError, WrongAnswerError

    if isinstance(error, FrontendError):
        raise error
    print_error(console, str(error))
    if isinstance(error, WrongAnswerError):
        return typer.Exit(ExitCode.WRONG_ANSWER)
    return typer.Exit(ExitCode.BAD_INPUT)


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
    console = make_console(stderr=True)
    if step is None:
        print_error(
            console,
            f"unexpected {gist} (the full traceback is "
            f"in {where}; please report it with that file)",
        )
        return typer.Exit(ExitCode.UNEXPECTED)
    print_error(
        console, f"the {step} step failed on the model: {gist} (the full traceback is in {where})"
    )
    return typer.Exit(ExitCode.FAILED)


def _log_traceback(error: Exception, command: str, store: Path | None) -> Path | str:
    """Write the error's traceback to the run's log when the command has a run, else to
    ``<store>/errors/<time>-<command>.log``; return the file (or, when no file takes it,
    say it is printed here)."""
    if active_contexts:
        ctx = active_contexts[-1]
        try:
            ctx.logger.error("unexpected error in `simpletvm %s`", command, exc_info=error)
            return ctx.store.log_path(ctx.run_id)
        except Exception:  # noqa: BLE001 - the run's log is unusable: fall back to a file
            pass
    from simpletvm.store import RunStore

    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{command}.log"
    logged = log_traceback(error, [RunStore(store).root / "errors"], name)
    if logged is None:
        make_console(stderr=True).print(traceback_text(error), highlight=False)
        return "the lines above"
    return logged


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
        runs = [ctx for ctx in active_contexts[-1:] if ctx.run_dir.exists()]
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
    for ctx in active_contexts:
        if _import_failed(ctx):
            ctx.status = "failed"
            if error is not None:
                ctx.logger.error("the import failed", exc_info=error)
            ctx.save()
            make_console(stderr=True).print(
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
    for ctx in active_contexts:
        ctx.status = "failed"
        try:
            ctx.save()
        except Exception:  # noqa: BLE001 - the error being reported matters more
            pass


def _failed_step() -> str | None:
    """The step the command's run recorded as failed when the error left it, if any: an
    error raised while a step worked on the model is that step's failure, one raised
    anywhere else a bug of the command's own."""
    if not active_contexts or not active_contexts[-1].steps:
        return None
    last = active_contexts[-1].steps[-1]
    return last["step"] if last["status"] == "error" else None


def _save_interrupted_run() -> None:
    """Ctrl-C: keep the command's run (its records are in the store already) and say so."""
    console = make_console(stderr=True)
    if not active_contexts:
        console.print("interrupted")
        return
    ctx = active_contexts[-1]
    ctx.status = "interrupted"
    ctx.logger.info("interrupted by the user")
    console.print(
        f"interrupted: run {ctx.run_id} saved as far as it got ({ctx.save()}); "
        "the records it measured are in the store",
        highlight=False,
        soft_wrap=True,
    )
