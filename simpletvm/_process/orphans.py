"""Worker processes that die with the process that started them.

MetaSchedule's build and run workers are separate processes. When the tuning process is
SIGKILLed they are not told, and each (about 200 MB) lives on, orphaned, ignoring
SIGTERM. A worker calls :func:`exit_with_parent` once, at start.
"""

from __future__ import annotations

import os
import threading
import time

POLL_S = 1.0


def exit_with_parent(poll_s: float = POLL_S) -> None:
    """End this process, from a daemon thread, as soon as its parent is gone (Linux
    re-parents an orphan, so its parent pid changes)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
