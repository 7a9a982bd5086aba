"""Commands other packages add to ``simpletvm``, found through the ``simpletvm.commands``
entry-point group (decision 020). The tuning service's ``serve``, ``submit``, ``jobs``
and ``fetch`` come this way: the service sits above simpletvm, which imports nothing of
it.

An entry point names a module with ``COMMANDS`` (each command's name and one-line help)
and ``run(args, prog_name)``, which runs one command as typed, its ``--help`` included:
the module decides what its commands need (an extra's libraries) before it parses them.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from simpletvm.console import make_console, print_error
from simpletvm.exit_codes import ExitCode
from simpletvm.extras import install_hint

GROUP = "simpletvm.commands"
# the commands the documentation names that an extra brings: without the entry point
# that registers them, each says how to get it
EXTRA_COMMANDS = {"serve": "service", "submit": "service", "jobs": "service", "fetch": "service"}


def add_command_groups(app: typer.Typer) -> None:
    """Register every installed group's commands on ``app``, and a hint for each command
    of :data:`EXTRA_COMMANDS` that none registered."""
    registered = set()
    for entry in sorted(entry_points(group=GROUP), key=lambda entry: entry.name):
        group = entry.load()
        for name, summary in group.COMMANDS.items():
            _pass_through(app, name, summary, group.run)
            registered.add(name)
    for name, extra in EXTRA_COMMANDS.items():
        if name not in registered:
            _not_installed(app, name, extra)


def _pass_through(app: typer.Typer, name: str, summary: str, run) -> None:
    """``simpletvm NAME ...``: every argument after NAME goes to the group's ``run``."""

    @app.command(
        name,
        help=summary,
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def command(ctx: typer.Context) -> None:
        run([name, *ctx.args], prog_name="simpletvm")


def _not_installed(app: typer.Typer, name: str, extra: str) -> None:
    hint = install_hint(extra)

    @app.command(
        name,
        help=f"(not installed: {hint})",
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def command() -> None:
        print_error(
            make_console(stderr=True),
            f"`simpletvm {name}` comes with the {extra} extra, whose commands are not "
            f"installed: {hint} (an editable install registers them when run again)",
        )
        raise typer.Exit(ExitCode.BAD_INPUT)
