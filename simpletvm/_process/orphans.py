"""Worker processes that die with the process that started them.

MetaSchedule's build and run workers, and TVM's RPC tracker and servers, are separate
processes. When the process that started them is SIGKILLed they are not told, and each
(about 200 MB) lives on, orphaned, ignoring SIGTERM. A worker calls
:func:`exit_with_parent` once, at start: as a pool's initializer,
:func:`exit_with_this_process`.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable

POLL_S = 1.0


def exit_with_parent(poll_s: float = POLL_S, parent: int | None = None) -> None:
    """End this process, from a daemon thread, as soon as its parent is gone (Linux
    re-parents an orphan, so its parent pid changes).

    ``parent`` is the pid of the process that started this one: a TVM worker imports
    TVM before it runs its initializer, and a parent killed meanwhile would otherwise
    go unnoticed (getppid already names the process that adopted it).
    """
    parent = os.getppid() if parent is None else parent
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def exit_with_this_process() -> Callable[[], None]:
    """An initializer for the workers this process starts: each exits once it is gone."""
    return functools.partial(exit_with_parent, parent=os.getpid())
