"""Ctrl-C inside TVM: an interrupt that TVM's FFI turned into a ``RuntimeError``.

MetaSchedule calls back into Python from C++ (the local runner waiting on its timings,
the cost model, the record database), and TVM's FFI hands any exception such a callback
raises back as its own error: a ``KeyboardInterrupt`` comes out as a bare
``RuntimeError('')``. A user pressing Ctrl-C during a profile stage would see an
"unexpected error", and one during a select stage would see the task given up as
untunable and the tuning go on. :func:`keep_interrupts` notes every SIGINT that arrives
while its block runs: an error that follows one surfaces as ``KeyboardInterrupt``, and
so does the block's end when the body took the interrupt for an ordinary error and
went on.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def keep_interrupts(*, deferred: bool = False) -> Iterator[None]:
    """Run the block so that SIGINT arriving in it ends it with ``KeyboardInterrupt``
    (chained to the error TVM made of it, if any). ``deferred``: the block runs to its
    end and raises then; for a tuning stage, whose search runs C++ worker threads that
    call back into Python: an exception raised there by the signal unwound the search
    under its threads (the process crashed) or was taken for the stage's own failure.
    Only the main thread receives Python's signals; elsewhere, or when SIGINT is
    ignored or left to the system, the block runs as it is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    received: list[int] = []

    def note_and_pass_on(signum, frame):
        received.append(signum)
        if not deferred:
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
    if received:  # the body caught what TVM made of the interrupt, and went on
        raise KeyboardInterrupt
