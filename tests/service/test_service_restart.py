"""A service killed with SIGKILL leaves no process behind, and started again resumes its
unfinished job under its run id, measuring nothing twice."""

from __future__ import annotations

import time

import pytest
from conftest import ServiceProcess, no_survivors

from service.client import Client
from simpletvm.tuning.record_files import open_records

pytestmark = pytest.mark.slow


def test_sigkill_leaves_nothing_and_a_restart_resumes_the_job(tmp_path, tiny_model) -> None:
    store = tmp_path / "store"
    service = ServiceProcess(store).start()
    try:
        with Client(service.url) as client:
            job_id = client.submit(tiny_model, trials=16)
            deadline = time.time() + 600
            while client.job(job_id)["trials_done"] < 2:  # tuning, with measurements kept
                assert time.time() < deadline
                time.sleep(0.5)
            before = client.job(job_id)["trials_done"]
            descendants = service.descendants()
            assert any("popen_worker" in " ".join(p.cmdline()) for p in descendants)
        service.kill()
        assert no_survivors(descendants, timeout=30) == []
    finally:
        service.stop()

    again = ServiceProcess(store).start()
    try:
        with Client(again.url) as client:
            job = client.wait(job_id, timeout=900)
            assert job["state"] == "done" and job["attempts"] == 2, job
            assert job["trials_done"] == 16 and before < 16
            measured = open_records(store).count(run_id=job_id)
            assert 0 < measured <= 16  # each candidate once: the budget, not more
            assert (client.fetch(job_id, tmp_path / "module") / "model.so").exists()
            assert [j["id"] for j in client.jobs()] == [job_id]
    finally:
        again.stop()
