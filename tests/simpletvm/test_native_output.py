"""Native (C++) log lines of a step go to the run's log; Python's warnings stay visible."""

from __future__ import annotations

import os
import sys

from simpletvm import BenchmarkingContext
from simpletvm._process.native_output import VERBOSE_VARIABLE


def test_native_output_of_a_step_goes_to_the_run_log(store, capfd, monkeypatch):
    monkeypatch.delenv(VERBOSE_VARIABLE, raising=False)
    ctx = BenchmarkingContext("cpu", store=store)
    with ctx.step("build"):
        os.write(2, b"executable.cc:276: Warning: Scope Saving\n")  # as TVM's C++ writes
        print("a Python warning", file=sys.stderr)
    os.write(2, b"after the step\n")
    captured = capfd.readouterr()
    assert "Scope Saving" not in captured.err
    assert "a Python warning" in captured.err and "after the step" in captured.err
    log = ctx.store.log_path(ctx.run_id).read_text()
    assert "executable.cc:276: Warning: Scope Saving" in log and "step build ok" in log


def test_verbose_keeps_native_output_on_the_terminal(store, capfd, monkeypatch):
    monkeypatch.setenv(VERBOSE_VARIABLE, "1")
    ctx = BenchmarkingContext("cpu", store=store)
    with ctx.step("save"):
        os.write(2, b"native line\n")
    assert "native line" in capfd.readouterr().err
