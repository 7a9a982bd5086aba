"""What TVM and TensorFlow print from C++ goes to a file, not the user's terminal.

Their native log lines bypass Python (one ``save()`` of the quickstart prints over a
hundred lines of ``executable.cc: Warning: Scope Saving``), so they are caught at the file
descriptors: while a SimpleTVM step runs, descriptor 2 is appended to the run's log,
while Python's own ``sys.stderr`` (warnings, tracebacks) still reaches the terminal.
A Python library that logs what it tried and gave up on, tracebacks and all, as a
converter's routine (tf2onnx's optimizers), is routed with the native output
(:func:`logs_as_native_output`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

VERBOSE_VARIABLE = "SIMPLETVM_VERBOSE"  # set to 1: native output stays on the terminal
_STREAMS = {1: "stdout", 2: "stderr"}


def verbose() -> bool:
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


@contextmanager
def redirected(
    path: str | Path, fds: tuple[int, ...] = (2,), keep_python: bool = False
) -> Iterator[None]:
    """Send the file descriptors ``fds`` (C++ writes included) to ``path`` (appended)
    for the duration; with ``keep_python``, Python's ``sys.stdout``/``sys.stderr`` of
    those descriptors keep writing where they wrote before."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = {fd: os.dup(fd) for fd in fds}
    replaced = {}
    with open(path, "ab") as target:
        for fd in fds:
            os.dup2(target.fileno(), fd)
            name = _STREAMS.get(fd)
            if keep_python and name and _descriptor(getattr(sys, name)) == fd:
                replaced[name] = getattr(sys, name)
                setattr(sys, name, os.fdopen(os.dup(saved[fd]), "w", buffering=1))
        try:
            yield
        finally:
            for name, original in replaced.items():
                getattr(sys, name).close()
                setattr(sys, name, original)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


@contextmanager
def logs_as_native_output(*names: str) -> Iterator[None]:
    """Write the records of the Python loggers ``names`` to file descriptor 2 as it is
    on entry, not to ``sys.stderr``: inside a step (or a ``simpletvm`` command) that is
    the run's log, with ``--verbose`` the terminal. For libraries whose failures that
    matter are raised, not only logged."""
    stream = os.fdopen(os.dup(2), "w", buffering=1)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in names]
    propagating = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, propagating):
            logger.removeHandler(handler)
            logger.propagate = propagate
        stream.close()


def _descriptor(stream) -> int | None:
    """The file descriptor under a Python stream (None for in-memory ones, as under a
    test runner's capture)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
