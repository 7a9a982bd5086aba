"""What the ``simpletvm`` and ``superb`` commands exit with, and their Ctrl-C.

One table for both, so a script or CI job reads either command's outcome the same way.
Standard library only: both CLIs load this before they know whether a command needs TVM.
"""

from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    """The exit codes of both commands."""

    OK = 0
    FAILED = 1  # the work ran and failed: a superb run failed, a simpletvm step on the model
    BAD_INPUT = 2  # nothing ran; the message names the fix
    UNEXPECTED = 3  # a bug: one line on the terminal, the traceback in the file it names
    INTERRUPTED = 130  # the shell's code for a command stopped by SIGINT: repeat it to resume


def honour_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt even when this process inherited it ignored.

    Background shells and test runners start programs with SIGINT ignored, and Python then
    installs no handler of its own; `kill -INT` must still stop a sweep cleanly and
    resumably. A handler installed by whoever embeds the CLI stays."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
