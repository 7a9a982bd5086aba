"""The ``superb`` command: sweep a grid of SimpleTVM runs without a human watching.

Exit codes (:class:`simpletvm.exit_codes.ExitCode`, shared with ``simpletvm``): 0 every
run ok, 1 some run failed (``compare --fail-on-regression``: a cell slower), 2 bad input
(nothing ran), 3 an unexpected error (a bug: one line on stderr, the traceback in a log
file; what was recorded stays and the same command resumes), 130 stopped by Ctrl-C or
SIGTERM (run the same command again to resume; the closing round too).

Only Typer, the grid reader and the exit codes are imported here; SimpleTVM, TVM and
pandas are imported when a command needs them, so ``superb --help`` is instant. Messages
print without Rich markup: a grid's name, an error or a path may hold brackets.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import typer

from simpletvm.console import log_traceback, make_console, print_error, traceback_text
from simpletvm.exit_codes import ExitCode, honour_ctrl_c, relay_ctrl_c
from simpletvm.extras import install_hint

from . import results_cli
from .cli_support import STORE, bad_input
from .display import print_plan, print_summary
from .grid import GridError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Sweep grids of SimpleTVM runs: every combination, recorded as CSV.",
)

GRID = typer.Argument(..., metavar="GRID", help="the grid file (YAML)", show_default=False)
PARAM = typer.Option(
    None, "--param", "-p", metavar="NAME=V1,V2", help="add or replace an axis (repeatable)"
)


def _unexpected(error: BaseException, log_dir: Path | None, note: str = "") -> typer.Exit:
    """An error that is no bad input (a bug): the full traceback goes to a log file in
    ``log_dir`` (else the store's superb directory, else the temporary directory), the
    terminal gets one line naming the error and one saying where the traceback is."""
    import time

    candidates = [log_dir] if log_dir is not None else []
    with contextlib.suppress(Exception):
        from simpletvm.store import RunStore

        candidates.append(RunStore().superb_dir)
    heading = f"{time.strftime('%Y-%m-%d %H:%M:%S')} superb {' '.join(sys.argv[1:])}\n"
    logged = log_traceback(error, candidates, "superb-errors.log", heading)
    message = str(error).strip().splitlines()
    console = make_console(stderr=True, unwrapped=True)
    print_error(
        console,
        f"superb stopped on an unexpected error (a bug, not your input): "
        f"{type(error).__name__}" + (f": {message[0]}" if message else ""),
    )
    console.print(
        (f"full traceback in {logged}" if logged else "traceback:\n" + traceback_text(error))
        + (f"; {note}" if note else "")
    )
    return typer.Exit(ExitCode.UNEXPECTED)


def _load_plan(
    grid_path: Path, params: list[str] | None, check: bool, tracker: tuple[str, int] | None = None
):
    from .grid import load_grid, parse_override
    from .plan import build_plan, preflight

    try:
        grid = load_grid(grid_path)
        overrides = [parse_override(text) for text in params or []]
        if overrides:
            grid = grid.with_overrides(overrides)
            grid.validate()
        plan = build_plan(grid)
        if check:
            preflight(plan, tracker)
    except GridError as error:
        raise bad_input(error.problems) from error
    return plan


def _parse_tracker(text: str | None) -> tuple[str, int] | None:
    if text is None:
        return None
    from .infra import parse_address

    try:
        return parse_address(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--tracker") from error


@app.command()
def plan(
    grid: Path = GRID,
    param: list[str] | None = PARAM,
    store: Path | None = STORE,
    json_output: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    check: bool = typer.Option(True, help="check models and targets (imports TVM)"),
):
    """Print the expanded runs and their count; run nothing."""
    import json

    the_plan = _load_plan(grid, param, check)
    done = _completed_keys(the_plan, store)
    if json_output:
        data = the_plan.to_json()
        for run in data["runs"]:
            run["done"] = run["key"] in done
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    print_plan(make_console(unwrapped=True), the_plan, done)


@app.command()
def run(
    grid: Path = GRID,
    param: list[str] | None = PARAM,
    store: Path | None = STORE,
    tracker: str | None = typer.Option(
        None,
        metavar="HOST:PORT",
        help="use this RPC tracker (its servers must be "
        "registered under the runs' device keys) instead of starting one",
    ),
    fail_fast: bool = typer.Option(
        False, "--fail-fast", help="stop at the first failed run (default: record it and go on)"
    ),
    retry_failed: bool = typer.Option(
        False, "--retry-failed", help="run failed runs again (default: keep them)"
    ),
    run_timeout: float | None = typer.Option(
        None, min=1, metavar="SECONDS", help="stop a run that takes longer"
    ),
    plain: bool | None = typer.Option(
        None,
        "--plain/--live",
        show_default=False,
        help="progress as plain lines / live display (default: live on a terminal)",
    ),
    jobs: int = typer.Option(
        1,
        min=1,
        help="keep this many runs in flight, their "
        "stages interleaved by the scheduler (a device never runs "
        "two stages at once)",
    ),
    policy: str = typer.Option(
        "round-robin",
        help="scheduling policy with --jobs: "
        "round-robin (stages interleaved), sequential, "
        "predictive or synchronous",
    ),
    backend: str = typer.Option(
        "processes", help="where the runs' jobs live: processes (on this machine) or ray"
    ),
    ray_address: str | None = typer.Option(
        None,
        metavar="ADDRESS",
        help="with --backend ray: join this Ray cluster "
        "('auto', 'ray://head:10001') instead of starting a local Ray instance",
    ),
    final_round: bool = typer.Option(
        True,
        "--final-round/--no-final-round",
        help="after the runs, time the modules they saved (and --peers) side by side in "
        "turns in this process: final.csv",
    ),
    finalists: int | None = typer.Option(
        None, min=1, metavar="N", help="the closing round times only the N fastest cells"
    ),
    peers: str | None = typer.Option(
        None,
        metavar="P1,P2",
        help="also time these frameworks on each model in the closing round "
        "(tflite, onnxruntime, openvino, tensorflow; adds to the grid's peers)",
    ),
    rounds: int = typer.Option(
        20,  # final_round.ROUNDS, written out: the CLI imports nothing heavy
        min=2,
        help="rounds of the closing round, each loading the modules anew (each contestant's "
        "turn: at least 10 timed calls, as many as fill 0.05 s); compare tests rounds, "
        "so at least 2 a side, and the self band splits them in two interleaved halves",
    ),
):
    """Run every combination of GRID, each one scheduler job in its own process.

    Runs already recorded in the experiment are skipped and a run that was stopped
    continues under its run id, so the same command resumes a sweep. Writes runs.csv
    and aggregate.csv as runs end, then final.csv: the closing round, every ok cell's
    module timed in turns with the others (median and bootstrap 95% interval), which
    the same command also resumes."""
    address = _parse_tracker(tracker)
    from scheduler.policies import POLICIES, policy_name

    try:
        policy = policy_name(policy)
    except ValueError:
        raise bad_input(
            [f"--policy {policy!r} is unknown: choose one of {', '.join(sorted(POLICIES))}"]
        ) from None
    _check_backend(backend, ray_address)
    named_peers = _named_peers(peers)
    the_plan = _load_plan(grid, param, check=True, tracker=address)
    all_peers = list(dict.fromkeys(the_plan.grid.peers + named_peers))
    from .infra import sigterm_interrupts
    from .progress import make_progress
    from .results import ExperimentBusy
    from .sweep import run_sweep

    console = make_console(unwrapped=True)
    try:
        with sigterm_interrupts():
            summary = run_sweep(
                the_plan,
                store=store,
                tracker=address,
                fail_fast=fail_fast,
                retry_failed=retry_failed,
                run_timeout=run_timeout,
                jobs=jobs,
                policy=policy,
                backend=backend,
                ray_address=ray_address,
                save_modules=final_round,
                progress_factory=lambda total, done, kinds: _announce(
                    make_progress(console, total, done, kinds, plain, jobs), the_plan, done
                ),
            )
            print_summary(console, summary, the_plan)
            if final_round:
                _closing_round(console, the_plan, store, finalists, all_peers, rounds)
    except ExperimentBusy as error:
        raise bad_input([error]) from error
    except KeyboardInterrupt:
        make_console(stderr=True, unwrapped=True).print(
            "interrupted: repeat the same command to resume; runs in flight continue "
            "under their run ids"
        )
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    except typer.Exit:
        raise
    except Exception as error:  # noqa: BLE001 - a bug: keep what was measured
        raise _unexpected(error, *_keep_recorded(the_plan, store)) from None
    raise typer.Exit(ExitCode.OK if summary.ok else ExitCode.FAILED)


def _named_peers(option: str | None) -> list[str]:
    """--peers' names; an unknown one is bad input."""
    from .grid import peer_problem

    named = [p.strip() for p in option.split(",") if p.strip()] if option else []
    if why := peer_problem(named):
        raise bad_input([f"--peers: {why}"])
    return named


def _closing_round(console, the_plan, store, finalists, peers, rounds) -> None:
    from .display import print_final
    from .final_round import FINAL_CSV, closing_round

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    final = closing_round(the_plan, store, finalists=finalists, peers=peers, rounds=rounds, say=say)
    if final is not None:
        print_final(console, final, final.attrs.get("path", FINAL_CSV))


def _keep_recorded(the_plan, store) -> tuple[Path, str]:
    """After an unexpected error: bring the experiment's CSVs up to date with the rows
    its log holds (each run's row is logged the moment it ends). Returns the experiment
    directory, for the traceback, and a note on what was kept."""
    from simpletvm.store import RunStore

    from .results import Experiment

    experiment = Experiment(RunStore(store).superb_dir / the_plan.grid.name)
    note = "repeat the same command to resume"
    if experiment.log_path.exists():
        with contextlib.suppress(Exception):  # the rows stay in the log in any case
            frame, _ = experiment.write_csvs([run.key for run in the_plan.runs])
            note = (
                f"the {len(frame)} runs recorded are in {experiment.runs_csv}; "
                "repeat the same command to resume"
            )
    return experiment.dir, note


def _check_backend(backend: str, ray_address: str | None) -> None:
    if backend not in ("processes", "ray"):
        raise bad_input([f"--backend {backend!r} is unknown: choose processes or ray"])
    if backend != "ray":
        if ray_address is not None:
            raise bad_input(["--ray-address needs --backend ray"])
        return
    if importlib.util.find_spec("ray") is None:
        raise bad_input([f"--backend ray needs Ray: {install_hint('ray')}"])


def _announce(progress, the_plan, done: int):
    total = len(the_plan.runs)
    progress.message(
        f"superb: {the_plan.grid.name}: {total} runs, {done} done before, {total - done} to run"
    )
    return progress


app.command()(results_cli.report)
app.command()(results_cli.compare)


@app.command()
def tracker(
    host: str = typer.Option("0.0.0.0", help="address to listen on"),
    port: int | None = typer.Option(None, help="port (default: the first free one in 9190-9199)"),
    key: str | None = typer.Option(
        None, help="also start servers with this device key on this machine"
    ),
    servers: int = typer.Option(1, min=1, help="how many servers of --key"),
):
    """Run an RPC tracker (and optionally servers) in the foreground until Ctrl-C."""
    from simpletvm.remote.rpc import LocalRPC

    from .infra import serve_until_signalled

    def announce(address):
        import socket

        shown = socket.gethostname() if host in ("0.0.0.0", "") else host
        typer.echo(
            f"tracker listening on {shown}:{address[1]}"
            + (f" with {servers} server(s) of key {key!r}" if key else "")
            + "; Ctrl-C stops it",
            err=False,
        )
        sys.stdout.flush()

    serve_until_signalled(LocalRPC([key] if key else [], servers, host, port=port), announce)


@app.command()
def server(
    tracker_address: str = typer.Option(
        ..., "--tracker", metavar="HOST:PORT", help="the tracker to register with"
    ),
    key: str = typer.Option(..., help="device key the servers register under"),
    count: int = typer.Option(1, min=1, help="how many servers"),
    host: str = typer.Option("0.0.0.0", help="address the servers listen on"),
):
    """Run RPC servers for this machine's device in the foreground until Ctrl-C."""
    from simpletvm.errors import SimpleTVMError
    from simpletvm.remote.rpc import LocalRPC

    from .infra import serve_until_signalled

    address = _parse_tracker(tracker_address)

    def announce(_address):
        typer.echo(
            f"{count} server(s) of key {key!r} registered with {address[0]}:"
            f"{address[1]}; Ctrl-C stops them"
        )
        sys.stdout.flush()

    try:
        serve_until_signalled(LocalRPC([key], count, host, tracker=address), announce)
    except SimpleTVMError as error:
        raise bad_input([error]) from error


@app.command()
def parameters():
    """List the parameters a grid can set and the SimpleTVM call each goes to."""
    from .parameters import PARAMETERS

    typer.echo(f"{'parameter':22} {'goes to':28} {'type':22} meaning")
    for p in PARAMETERS.values():
        call = f"{p.call}({p.argument}=)" if p.argument else f"{p.call} (on/off)"
        kind = p.kind + (" or null" if p.nullable else "")
        typer.echo(f"{p.name:22} {call:28} {kind:22} {p.help}")


def _completed_keys(the_plan, store) -> set[str]:
    """Keys of the plan's runs already recorded as finished in its experiment."""
    from simpletvm.store import RunStore

    from .results import Experiment

    experiment = Experiment(RunStore(store).superb_dir / the_plan.grid.name)
    if not experiment.log_path.exists():
        return set()
    rows = experiment.state().rows
    return {run.key for run in the_plan.runs if run.key in rows}


def main() -> None:
    """The ``superb`` program. Ctrl-C stops it even when it was started with SIGINT
    ignored, as background shells and test runners start programs (see honour_ctrl_c)."""
    honour_ctrl_c()
    relay_ctrl_c()
    try:
        app()
    except Exception as error:  # noqa: BLE001 - the CLI's edge: a bug becomes one message
        # (`run` handles its own, keeping the experiment's rows; this is for the rest)
        exit_ = _unexpected(error, None)
        sys.exit(exit_.exit_code)


if __name__ == "__main__":
    main()
