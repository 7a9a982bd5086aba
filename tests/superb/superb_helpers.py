"""Ways to call superb as a real process (python -m superb) from the tests, and to tell
whether a process it started still runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def superb_command(*args) -> list[str]:
    return [sys.executable, "-m", "superb", *[str(a) for a in args]]


def superb_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": str(REPO) + (os.pathsep + path if path else ""),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def run_superb(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        superb_command(*args),
        cwd=REPO,
        env=superb_env(),
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def alive(process: int | psutil.Process) -> bool:
    """Whether a process still runs: a zombie does not, and a Process (not a bare pid)
    also tells its pid taken by another process since."""
    try:
        if not isinstance(process, psutil.Process):
            process = psutil.Process(process)
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
