"""``simpletvm serve``, ``submit``, ``jobs`` and ``fetch``: a command group that
``simpletvm`` finds through the ``simpletvm.commands`` entry point (pyproject.toml), as
:mod:`simpletvm.cli.extensions` describes; simpletvm imports nothing of the service.
``python -m service.cli`` runs the same commands."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from simpletvm.console import latency_text, make_console, print_error

TOKEN_ENV = "SIMPLETVM_SERVICE_TOKEN"
# the commands as `simpletvm --help` lists them
COMMANDS = {
    "serve": "Start a tuning service for many users (see --help).",
    "submit": "Submit a model to a tuning service (see --help).",
    "jobs": "List your jobs on a tuning service.",
    "fetch": "Download a done job's module from a tuning service.",
}
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The tuning service: serve it, submit to it, list and fetch jobs.",
)
Server = Annotated[
    str, typer.Option("--server", help="the service's URL, e.g. http://127.0.0.1:8000")
]
Token = Annotated[
    str | None,
    typer.Option("--token", envvar=TOKEN_ENV, help="your token (loopback services need none)"),
]


def run(args: list[str], prog_name: str) -> None:
    """Run the service's command line; without the service extra, a message naming it and
    the bad-input exit code instead of an import error."""
    from service import require_extra
    from simpletvm.exit_codes import ExitCode

    try:
        require_extra()
    except ImportError as error:
        print_error(make_console(stderr=True), str(error))
        raise SystemExit(ExitCode.BAD_INPUT) from None
    app(args, prog_name=prog_name)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="address to bind; other than loopback needs tokens")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    store: Annotated[
        str | None, typer.Option(help="the run store (default $SIMPLETVM_HOME or ~/tvm-benchmark)")
    ] = None,
    device_keys: Annotated[
        list[str] | None,
        typer.Option("--device-key", help="device keys to start servers for (repeatable)"),
    ] = None,
    servers: Annotated[int, typer.Option(help="RPC servers (devices) per key")] = 1,
    tracker: Annotated[
        str | None, typer.Option(help="HOST:PORT of your own RPC tracker instead of local servers")
    ] = None,
    backend: Annotated[
        str, typer.Option(help="where jobs run: processes, or ray (a local Ray instance)")
    ] = "processes",
    max_in_flight: Annotated[int, typer.Option(help="jobs in the scheduler at once")] = 4,
    policy: Annotated[
        str, typer.Option(help="how the scheduler interleaves the jobs' stages")
    ] = "predictive",
    max_upload_mb: Annotated[float, typer.Option()] = 100.0,
    require_tokens: Annotated[bool, typer.Option(help="require tokens on loopback too")] = False,
    add_user: Annotated[
        str | None, typer.Option(help="create a user, print its token, exit")
    ] = None,
) -> None:
    """Start the tuning service (FastAPI on uvicorn): jobs arrive live into one scheduler."""
    import uvicorn

    from service.app import Settings, create_app
    from service.db import JobTable
    from service.runner import BACKENDS
    from simpletvm.store import RunStore

    errors = make_console(stderr=True)
    if backend not in BACKENDS:
        print_error(errors, f"--backend {backend!r} is unknown: choose processes or ray")
        raise typer.Exit(2)
    if backend == "ray":
        from simpletvm.extras import require

        try:
            require("ray", ("ray",), "--backend ray")
        except ImportError as error:
            print_error(errors, str(error))
            raise typer.Exit(2) from None
    from scheduler.policies import policy_name

    try:
        policy = policy_name(policy)
    except ValueError as error:
        print_error(errors, f"--policy: {error}")
        raise typer.Exit(2) from None
    root = RunStore(store).root
    if add_user:
        token = JobTable(root / "service" / "service.sqlite").add_user(add_user)
        typer.echo(f"user {add_user}: token {token} (shown once; only its hash is kept)")
        return
    address = None
    if tracker:
        name, _, number = tracker.rpartition(":")
        address = (name, int(number))
    settings = Settings(
        str(root),
        host,
        tuple(device_keys or ["local"]),
        servers,
        address,
        backend,
        max_in_flight,
        int(max_upload_mb * 1024 * 1024),
        require_tokens,
        policy=policy,
    )
    app = create_app(settings)
    # warnings and errors only; no access log, so a status request makes no logging call
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def _client(server: str, token: str | None):
    from simpletvm.client import Client

    return Client(server, token or os.environ.get(TOKEN_ENV))


@app.command()
def submit(
    model: Annotated[str, typer.Argument(help="a model file or a built-in name")],
    server: Server,
    token: Token = None,
    target: str = "cpu",
    device_key: str | None = None,
    minutes: float | None = None,
    trials: int | None = None,
    latency_ms: Annotated[
        float | None, typer.Option(help="answer from the store's records when they meet it")
    ] = None,
    known_only: Annotated[bool, typer.Option(help="only what the store knows: no tuning")] = False,
    wait: Annotated[bool, typer.Option(help="show progress until the job ends")] = False,
) -> None:
    """Submit a model; prints its job id (its run id in the store)."""
    from simpletvm.client import ServiceError

    with _client(server, token) as client:
        try:
            job_id = client.submit(
                model,
                target=target,
                device_key=device_key,
                minutes=minutes,
                trials=trials,
                latency_ms=latency_ms,
                known_only=known_only,
            )
        except ServiceError as error:
            typer.echo(f"refused: {error.detail}", err=True)
            raise typer.Exit(2) from None
        typer.echo(job_id)
        if not wait:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True
        ) as bar:
            task = bar.add_task("queued", total=1.0)
            while True:
                job = client.job(job_id)
                estimate = (
                    f"  {latency_text(job['estimate_ms'])} ms" if job.get("estimate_ms") else ""
                )
                bar.update(
                    task,
                    completed=job.get("progress") or 0.0,
                    description=f"{job['state']} {job.get('stage') or ''} "
                    f"{job['trials_done']} trials{estimate}",
                )
                if job["state"] in ("done", "failed", "cancelled"):
                    break
                time.sleep(1.0)
        typer.echo(
            f"{job['state']}: {job['trials_done']} trials"
            + (
                f", estimate {latency_text(job['estimate_ms'])} ms"
                if job.get("estimate_ms")
                else ""
            )
            + (f" ({job['error']})" if job.get("error") else "")
        )
        if job["state"] != "done":
            raise typer.Exit(1)


@app.command()
def jobs(server: Server, token: Token = None) -> None:
    """Your jobs: id, model, state, trials, estimate."""
    from simpletvm.client import ServiceError

    with _client(server, token) as client:
        try:
            rows = client.jobs()
        except ServiceError as error:
            typer.echo(f"refused: {error.detail}", err=True)
            raise typer.Exit(2) from None
    typer.echo(f"{'id':32}  {'model':20}  {'state':9}  {'trials':>6}  estimate")
    for job in rows:
        estimate = f"{latency_text(job['estimate_ms'])} ms" if job.get("estimate_ms") else "-"
        typer.echo(
            f"{job['id']:32}  {job['model'][:20]:20}  {job['state']:9}  "
            f"{job['trials_done']:>6}  {estimate}"
        )


@app.command()
def fetch(
    job: str,
    server: Server,
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="directory to write model.so and metadata.json to"),
    ],
    token: Token = None,
) -> None:
    """Download a done job's module directory."""
    from simpletvm.client import ServiceError

    with _client(server, token) as client:
        try:
            path = client.fetch(job, output)
        except ServiceError as error:
            typer.echo(f"cannot fetch: {error.detail}", err=True)
            raise typer.Exit(2) from None
    typer.echo(str(path))


if __name__ == "__main__":
    sys.exit(app())
