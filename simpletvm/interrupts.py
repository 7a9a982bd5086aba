"""Ctrl-C inside TVM: an interrupt that TVM's FFI turned into a ``RuntimeError``.

MetaSchedule calls back into Python from C++ (the local runner waiting on its timings,
the cost model, the record database), and TVM's FFI hands any exception such a callback
raises back as its own error: a ``KeyboardInterrupt`` comes out as a bare
``RuntimeError('')``. A user pressing Ctrl-C during a profile stage would see an
"unexpected error" instead of an interrupted run. :func:`keep_interrupts` notes every
SIGINT that arrives while its block runs and raises ``KeyboardInterrupt`` in place of an
error that follows one.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def keep_interrupts() -> Iterator[None]:
    """Run the block so that an error raised after SIGINT arrived surfaces as
    ``KeyboardInterrupt`` (chained to that error). Only the main thread receives Python's
    signals; elsewhere, or when SIGINT is ignored or left to the system, the block runs
    as it is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    received: list[int] = []

    def note_and_pass_on(signum, frame):
        received.append(signum)
        previous(signum, frame)

    signal.signal(signal.SIGINT, note_and_pass_on)
    try:
        yield
    except Exception as error:
        if received:
            raise KeyboardInterrupt from error
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
