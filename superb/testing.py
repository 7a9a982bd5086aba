"""Fakes for tests: run bodies that stand in for SimpleTVM in a run's process.

``IsolatedRunner(target=superb.testing.fake_child, preload=("superb.testing",))`` runs
sweeps in milliseconds; a run whose ``model`` parameter says so ends the way it names:
``"crash"`` dies of SIGSEGV, ``"exit"`` exits without a result, ``"fail"`` reports a
failure, ``"hang"`` sleeps until stopped; anything else succeeds.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any


def fake_child(spec: dict[str, Any], conn) -> None:
    os.setsid()
    model = Path(str(spec["params"].get("model"))).name  # superb makes model paths absolute
    conn.send({"type": "step", "step": "from_model"})
    if model == "crash":
        ctypes.string_at(0)  # a segfault, as a TVM crash would be
    if model == "exit":
        os._exit(3)
    if model == "hang":
        time.sleep(3600)
    result = {"type": "result", "status": "ok", "error": None, "run_id": spec["run_id"],
              "simpletvm_s": 0.0, "context_path": None}
    if model == "fail":
        result.update(status="failed", error="ModelImportError: a fake failure")
    conn.send(result)
