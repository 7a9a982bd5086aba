"""Ctrl-C while TVM runs a Python callback (MetaSchedule's runner, cost model, database)
stops the command as an interrupt: exit 130, the run saved, its records kept."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import tvm_ffi
from typer.testing import CliRunner

from simpletvm._process.interrupts import keep_interrupts
from simpletvm.cli import app
from simpletvm.tuning.record_files import open_records


@pytest.fixture
def python_sigint():
    """SIGINT raising KeyboardInterrupt, as in a terminal (a test worker may ignore it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield signal.default_int_handler
    signal.signal(signal.SIGINT, previous)


def interrupted_inside_tvm() -> None:
    """SIGINT arriving while C++ has called back into Python, as during a profile stage."""

    def callback():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the interrupt is raised in here

    tvm_ffi.convert(callback)()


def test_tvm_hands_an_interrupt_in_a_callback_back_as_a_runtime_error(python_sigint):
    with pytest.raises(RuntimeError) as caught:
        interrupted_inside_tvm()
    assert not isinstance(caught.value, KeyboardInterrupt)  # what keep_interrupts mends


def test_an_error_after_sigint_surfaces_as_the_interrupt(python_sigint):
    with pytest.raises(KeyboardInterrupt) as caught:
        with keep_interrupts():
            interrupted_inside_tvm()
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert signal.getsignal(signal.SIGINT) is python_sigint  # the handler put back


def test_an_error_without_sigint_stays_itself(python_sigint):
    with pytest.raises(ValueError, match="not an interrupt"):
        with keep_interrupts():
            raise ValueError("not an interrupt")
    assert signal.getsignal(signal.SIGINT) is python_sigint


def test_an_interrupt_the_body_took_for_an_error_still_ends_the_block(python_sigint):
    went_on = []
    with pytest.raises(KeyboardInterrupt):
        with keep_interrupts():
            try:
                interrupted_inside_tvm()
            except RuntimeError:  # as a stage takes a failure of TVM's
                went_on.append(True)
            went_on.append("to the end")
    assert went_on == [True, "to the end"]


def test_ctrl_c_while_a_task_starts_stops_the_tuning_not_only_that_task(
    store, tiny_onnx, monkeypatch, python_sigint
):
    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.tuning.job import TuningJob

    started: list[int] = []

    def start_task(self, index):  # MetaSchedule's search calls back into Python here
        started.append(index)
        interrupted_inside_tvm()

    monkeypatch.setattr(TuningJob, "_start_task", start_task)
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx)
    with pytest.raises(KeyboardInterrupt):
        stvm.autotune(trials=2)
    assert len(started) == 1  # not every task given up as untunable, one after another
    assert stvm.context.steps[-1]["step"] == "autotune"
    assert stvm.context.steps[-1]["error"].startswith("KeyboardInterrupt")


def test_ctrl_c_inside_tvm_during_a_step_exits_130_with_the_run_saved(
    store, tiny_onnx, monkeypatch, python_sigint
):
    from simpletvm.api import SimpleTVM

    def autotune(self, *args, **kwargs):  # a step whose TVM call is interrupted
        with self.context.step("autotune"):
            interrupted_inside_tvm()

    monkeypatch.setattr(SimpleTVM, "autotune", autotune)
    result = CliRunner().invoke(app, ["tune", str(tiny_onnx), "--store", str(store)])
    assert result.exit_code == 130, result.output
    text = " ".join(result.output.split())
    assert "unexpected" not in text
    run_id = re.search(r"interrupted: run (\w{32}) saved", text).group(1)
    context = json.loads((store / "runs" / run_id / "context.json").read_text())
    assert [(s["step"], s["status"]) for s in context["steps"]] == [
        ("from_model", "ok"),
        ("autotune", "error"),
    ]
    assert context["steps"][-1]["error"].startswith("KeyboardInterrupt")


@pytest.mark.slow
def test_ctrl_c_during_real_tuning_exits_130_and_keeps_what_was_measured(store, tiny_onnx):
    tuning = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simpletvm",
            "tune",
            str(tiny_onnx),
            "--minutes",
            "10",
            "--store",
            str(store),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as in a terminal
    try:
        deadline = time.monotonic() + 300
        while not (store / "records.sqlite").exists() or len(open_records(store)) < 4:
            assert tuning.poll() is None, tuning.communicate()
            assert time.monotonic() < deadline, "no candidate measured in 300 s"
            time.sleep(0.2)
        measured = len(open_records(store))
        tuning.send_signal(signal.SIGINT)
        stdout, stderr = tuning.communicate(timeout=120)
    finally:
        tuning.kill()
    assert tuning.returncode == 130, stdout + stderr
    text = " ".join((stdout + stderr).split())
    assert "unexpected" not in text and "Traceback" not in text
    run_id = re.search(r"interrupted: run (\w{32}) saved", text).group(1)
    context = json.loads((store / "runs" / run_id / "context.json").read_text())
    assert context["steps"][-1]["step"] == "autotune"
    assert context["steps"][-1]["error"].startswith("KeyboardInterrupt")
    assert len(open_records(store)) >= measured  # nothing measured is lost


# a program's entry, then a C library that takes SIGINT's disposition with a handler of
# its own (libc's abs: it returns and the signal goes no further), as TVM's arithmetic
# prover does around each of its queries; then a blocking call
TAKEN_OVER = """
import ctypes, signal, sys, time
from simpletvm.exit_codes import honour_ctrl_c, relay_ctrl_c
honour_ctrl_c()
if sys.argv[1] == "relay":
    relay_ctrl_c()
libc = ctypes.CDLL(None)
libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.signal(signal.SIGINT, ctypes.cast(libc.abs, ctypes.c_void_p))
try:  # "ready" inside: an interrupt landing as it prints is caught too
    print("ready", flush=True)
    time.sleep(120)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.parametrize("relayed", [True, False])
def test_ctrl_c_reaches_python_though_a_c_library_holds_the_signal(relayed):
    """With the relay the programs start, the interrupt reaches Python's handler and wakes
    the blocking call; without it, the library's handler takes it and the call sleeps on."""
    program = subprocess.Popen(
        [sys.executable, "-c", TAKEN_OVER, "relay" if relayed else "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert program.stdout.readline().strip() == "ready", program.stderr.read()
        program.send_signal(signal.SIGINT)
        if relayed:
            stdout, stderr = program.communicate(timeout=60)
            assert stdout.strip() == "interrupted", stderr
            assert program.returncode == 0
        else:
            with pytest.raises(subprocess.TimeoutExpired):
                program.communicate(timeout=3)
    finally:
        program.kill()
        program.communicate()
