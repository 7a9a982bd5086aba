"""What the command lines (``simpletvm``, ``superb``, the service's) print with, worded
once: the Rich console, the ``error:`` line, where an unexpected error's traceback goes,
and how a duration and a latency read.

Standard library only at import (Rich loads when a console is made): every CLI and
``simpletvm.progress`` import it, and their ``--help`` stays instant."""

from __future__ import annotations

import math
import tempfile
import traceback
from pathlib import Path


def make_console(stderr: bool = False, *, unwrapped: bool = False):
    """A console that prints text as written (no Rich markup: an error's text or a path
    may hold brackets, ``'simpletvm[service]'``); a table or a ``Text`` carries its own
    styles. ``unwrapped``: messages never wrap nor get highlighted, and tables get 200
    columns when the output is not a terminal (a sweep's output goes to log files)."""
    from rich.console import Console

    if not unwrapped:
        return Console(stderr=stderr, markup=False)
    options = {"stderr": stderr, "highlight": False, "soft_wrap": True, "markup": False}
    console = Console(**options)
    return console if console.is_terminal else Console(**options, width=200)


def print_error(console, message: str) -> None:
    """``error: MESSAGE`` on one line, the message as written (paths stay unbroken)."""
    from rich.text import Text

    console.print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)


def log_traceback(
    error: BaseException, directories: list[Path], file_name: str, heading: str = ""
) -> Path | None:
    """Append ``heading`` and the error's traceback to ``file_name`` in the first of
    ``directories``, then the temporary directory, that takes it; return the file (None
    when none did: the caller shows :func:`traceback_text` instead)."""
    text = heading + traceback_text(error) + "\n"
    for directory in [*directories, Path(tempfile.gettempdir())]:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / file_name
            with open(path, "a", encoding="utf-8") as file:
                file.write(text)
            return path
        except OSError:
            continue
    return None


def traceback_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def clock_text(seconds: float | None) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour); ``?`` when not known (yet)."""
    if seconds is None:
        return "?"
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def latency_text(milliseconds: float) -> str:
    """A latency in ms, to at least four significant digits (three decimals from 1 ms
    up): a small model's kernels take microseconds, and a verdict computed from the
    printed numbers needs them."""
    decimals = 3 - math.floor(math.log10(milliseconds)) if 0 < milliseconds < 1 else 3
    return f"{milliseconds:.{decimals}f}"


def ms_text(seconds: float) -> str:
    """A latency given in seconds, in ms as :func:`latency_text` writes it."""
    return latency_text(seconds * 1e3)


def native_output_to(path: str | Path):
    """A context in which what native libraries print (TensorFlow's absl and oneDNN
    notices, TFLite's delegate, TVM's warnings) is appended to ``path`` instead of the
    terminal, Python's own output still reaching it; with ``SIMPLETVM_VERBOSE=1`` it
    stays on the terminal."""
    import contextlib

    from simpletvm._process.native_output import redirected, verbose

    if verbose():
        return contextlib.nullcontext()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return redirected(path, keep_python=True)
