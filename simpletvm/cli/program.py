"""The ``simpletvm`` Typer application, and :func:`command`, which each verb's module
registers its commands with."""

from __future__ import annotations

import inspect
import os

import typer

from simpletvm.cli.guard import guarded
from simpletvm.cli_options import VERBOSE_HELP, flags_without_type

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


def command(*args, **kwargs):
    """``app.command``, with errors turned into one line and their exit code (see
    :mod:`simpletvm.cli.guard`); the help is the docstring, each paragraph one line for
    the terminal to wrap at its width (Typer keeps a docstring's line breaks: sentences
    broken mid-way)."""

    def register(function):
        paragraphs = inspect.cleandoc(function.__doc__ or "").split("\n\n")
        text = "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)
        return app.command(*args, help=text, **kwargs)(guarded(function))

    return register
