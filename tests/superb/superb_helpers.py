"""Ways to call superb as a real process (python -m superb) from the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def superb_command(*args) -> list[str]:
    return [sys.executable, "-m", "superb", *[str(a) for a in args]]


def superb_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else ""),
            "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_superb(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(superb_command(*args), cwd=REPO, env=superb_env(), text=True,
                          capture_output=True, timeout=timeout)
