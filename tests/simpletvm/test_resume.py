"""A tuning run killed with SIGKILL and started again continues where it stopped."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.tuning.records import RecordStore

TUNE = "trials=8, batch_size=4, population=32, genetic_iterations=1, seed=3"  # both runs

pytestmark = pytest.mark.slow


def _measured_traces(store, run_id: str) -> list[tuple[int, str]]:
    """(workload, trace) of every record the run committed."""
    import json
    import sqlite3

    with sqlite3.connect(f"file:{store / 'records.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT workload_id, json FROM records WHERE run_id = ?",
                          (run_id,)).fetchall()
    return [(workload, json.dumps(json.loads(text)[0])) for workload, text in rows]


def test_resume_after_sigkill_measures_nothing_twice(tmp_path, tiny_onnx):
    store, run_id = tmp_path / "store", "resume" + "0" * 26
    records = RecordStore(store / "records.sqlite")
    script = textwrap.dedent(f"""
        from simpletvm import BenchmarkingContext, SimpleTVM
        ctx = BenchmarkingContext("cpu", store={str(store)!r}, run_id={run_id!r})
        SimpleTVM(ctx).from_model({str(tiny_onnx)!r}).autotune({TUNE})
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while records.count(run_id=run_id) < 8:
            assert child.poll() is None, "the tuning process ended before it could be killed"
            assert time.monotonic() < deadline, "no records appeared in time"
            time.sleep(0.2)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    before = collections.Counter(records.run_counts(run_id))
    assert sum(before.values()) >= 8

    ctx = BenchmarkingContext("cpu", store=store, run_id=run_id)
    stvm = SimpleTVM(ctx).from_model(tiny_onnx)
    stvm.autotune(trials=8, batch_size=4, population=32, genetic_iterations=1, seed=3)
    after = collections.Counter(records.run_counts(run_id))
    assert all(after[w] >= n for w, n in before.items())
    measured = _measured_traces(store, run_id)
    assert len(measured) == len(set(measured)), "a candidate was measured twice"
    assert max(after.values()) <= 8, "a task measured more than its budget: repeats"
    summary = stvm.tuning_summary
    assert summary["errors"] == 0
    # each task's count includes what the killed run measured before it died
    assert summary["trials"] == sum(after.values())
    assert sum(after.values()) > sum(before.values()), "the resumed run did no work"
