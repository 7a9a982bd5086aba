"""What superb's commands share: the store option and bad input's message and exit code.
Typer and the console only, so ``superb --help`` stays instant."""

from __future__ import annotations

import typer

from simpletvm.cli_options import STORE_HELP
from simpletvm.console import make_console, print_error
from simpletvm.exit_codes import ExitCode

STORE = typer.Option(None, "--store", help=STORE_HELP + "; experiments go to <store>/superb/<name>")


def bad_input(problems) -> typer.Exit:
    """Print each problem as an error line; the exit for bad input (nothing ran)."""
    console = make_console(stderr=True, unwrapped=True)
    for problem in problems:
        print_error(console, str(problem))
    return typer.Exit(ExitCode.BAD_INPUT)
