"""What the ``simpletvm`` and ``superb`` commands exit with, and their Ctrl-C.

One table for both, so a script or CI job reads either command's outcome the same way.
Standard library only: both CLIs load this before they know whether a command needs TVM.
"""

from __future__ import annotations

import _thread
import enum
import signal
import threading


class ExitCode(enum.IntEnum):
    """The exit codes of both commands."""

    OK = 0
    FAILED = 1  # the work ran and failed: a superb run failed, a simpletvm step on the model
    BAD_INPUT = 2  # nothing ran; the message names the fix
    UNEXPECTED = 3  # a bug: one line on the terminal, the traceback in the file it names
    # a build refused: its answers are further from the model's own framework's than the
    # tolerance allows (the message names the output, the error and the tolerance)
    WRONG_ANSWER = 4
    INTERRUPTED = 130  # the shell's code for a command stopped by SIGINT: repeat it to resume


def honour_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt even when this process inherited it ignored.

    Background shells and test runners start programs with SIGINT ignored, and Python then
    installs no handler of its own; `kill -INT` must still stop a sweep cleanly and
    resumably. A handler installed by whoever embeds the CLI stays."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# wakes the main thread from a blocking call once a Ctrl-C is relayed; ignored by
# default, and nothing else here uses it
_WAKE = signal.SIGURG
_relaying = False


def relay_ctrl_c() -> None:
    """Hand every SIGINT to Python's handler in the main thread, whatever holds the
    signal's disposition when it lands. TVM's arithmetic prover (Z3) installs its own
    SIGINT handler around each query, many times a second while a tuning selects
    schedules, and a Ctrl-C landing in one cancels that query and goes no further. So
    SIGINT is blocked in the main thread, before any other thread starts (threads and
    child processes inherit the mask: the children are stopped by their owner), and a
    relay thread takes each one from the kernel (``sigwait``), trips Python's handler
    (``_thread.interrupt_main``) and wakes the main thread from a blocking call. Call it
    first thing in a program's entry, from its main thread; once is enough."""
    global _relaying
    if _relaying or threading.current_thread() is not threading.main_thread():
        return
    _relaying = True
    main = threading.main_thread().ident
    if signal.getsignal(_WAKE) in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(_WAKE, lambda *_: None)  # a blocking call returns, handlers run
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def relay() -> None:
        while True:
            signal.sigwait({signal.SIGINT})
            _thread.interrupt_main(signal.SIGINT)
            signal.pthread_kill(main, _WAKE)

    threading.Thread(target=relay, name="ctrl-c relay", daemon=True).start()
