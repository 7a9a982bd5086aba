"""Jobs through the real service: one tunes, then what is known answers first (0 trials),
its module downloads, its events stream, and the page shows it in a headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from service_helpers import ServiceProcess

from simpletvm.client import Client

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, tiny_model):
    """A service whose store has tuned every task of the tiny model (one job, 16 trials:
    with one per task, a task whose first candidate fails keeps no record)."""
    store = tmp_path_factory.mktemp("service-jobs") / "store"
    service = ServiceProcess(store).start()
    client = Client(service.url)
    job_id = client.submit(tiny_model, trials=16)
    job = client.wait(job_id, timeout=600)
    service.tuned_job = job_id
    yield service, client, job
    client.close()
    service.stop()


def test_a_tuning_job_measures_its_budget_and_its_module_downloads(tuned, tmp_path) -> None:
    """simpletvm.client.Client submitted it (the fixture), lists it and fetches its module."""
    service, client, job = tuned
    assert job["state"] == "done", job
    assert job["trials_done"] == 16 and job["estimate_ms"] > 0
    assert not job["answered_from_store"]
    assert [j["id"] for j in client.jobs()][:1] == [job["id"]]  # the first job listed
    stages = client.trace(job["id"])
    assert {s["stage"] for s in stages} >= {
        "import",
        "select",
        "build",
        "profile",
        "update",
        "save",
    }
    assert stages[0]["stage"] == "import" and stages[0]["role"] == "client"
    device = sorted((s["start"], s["end"]) for s in stages if s["role"].startswith("device"))
    assert device and all(a[1] <= b[0] + 1e-6 for a, b in zip(device, device[1:]))
    out = client.fetch(job["id"], tmp_path / "module")
    assert sorted(p.name for p in out.iterdir()) == ["metadata.json", "model.so"]
    # the job's id is its run id: its context is in the store as any run's
    assert (service.store / "runs" / job["id"] / "context.json").exists()


def test_what_is_known_answers_first_with_0_trials(tuned, tmp_path) -> None:
    """known-only: the job's worker imports the model, finds records for every task, and
    builds from them: no tuning stage, no trial."""
    service, client, tuned_job = tuned
    job_id = client.submit(_model(service), known_only=True, trials=50)
    job = client.wait(job_id, timeout=300, poll_s=0.1)
    assert job["state"] == "done" and job["answered_from_store"], job
    assert job["trials_done"] == 0
    assert job["estimate_ms"] == pytest.approx(tuned_job["estimate_ms"], rel=0.5)
    assert [s["stage"] for s in client.trace(job_id)] == ["import", "save"]
    assert (client.fetch(job_id, tmp_path / "m") / "model.so").exists()
    events = list(client.events(job_id))
    assert events[-1]["event"] == "end" and events[-1]["state"] == "done"
    assert any(e["event"] == "stage" and e["stage"] == "save" for e in events)


def test_a_known_model_under_its_latency_target_comes_back_at_once(tuned, tmp_path) -> None:
    """The same model file on the same target, whose module built from the store's
    records meets the latency target: answered on submission, 0 trials, under 2 s."""
    service, client, tuned_job = tuned
    started = time.time()
    job_id = client.submit(_model(service), latency_ms=tuned_job["estimate_ms"] * 2, trials=50)
    job = client.wait(job_id, timeout=60, poll_s=0.05)
    module = client.fetch(job_id, tmp_path / "m") / "model.so"
    elapsed = time.time() - started
    assert job["state"] == "done" and job["answered_from_store"] and job["trials_done"] == 0, job
    assert module.exists() and elapsed < 2.0, elapsed
    # a target the known module misses goes to the scheduler instead
    slow = client.submit(_model(service), latency_ms=tuned_job["estimate_ms"] / 1000, trials=50)
    assert client.job(slow)["state"] != "done"
    client.cancel(slow)
    assert client.wait(slow, timeout=300)["state"] == "cancelled"


def test_known_only_with_missing_records_fails_with_the_reason(tuned, tmp_path) -> None:
    from simpletvm.testing import tiny_cnn_onnx

    service, client, _ = tuned
    other = tiny_cnn_onnx(tmp_path / "other.onnx", image_size=20)  # other shapes: unknown
    job = client.wait(client.submit(other, known_only=True), timeout=300)
    assert job["state"] == "failed" and "known-only" in job["error"], job


def _model(service: ServiceProcess):
    """The tuned job's model, as the service stored it (under the job's id)."""
    return service.store / "service" / "uploads" / f"{service.tuned_job}.onnx"


def test_the_page_shows_a_job_move_to_done_and_its_stages(tuned, tmp_path) -> None:
    pytest.importorskip("selenium")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("needs Debian's chromium and chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    service, client, _ = tuned
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(service.url + "/")
        job_id = client.submit(_model(service), known_only=True)

        # the page redraws every second: read it in one script, never through stale elements
        def state(d):
            return d.execute_script(
                "const r = document.getElementById(arguments[0]); return r && r.dataset.state;",
                f"job-{job_id}",
            )

        WebDriverWait(driver, 60).until(lambda d: state(d) is not None)
        WebDriverWait(driver, 300).until(lambda d: state(d) in ("done", "failed", "cancelled"))
        assert state(driver) == "done", client.job(job_id)

        def stages(d):
            return d.execute_script(
                "return [...document.querySelectorAll('#gantt rect.stage')]"
                ".map(r => [r.dataset.job, r.dataset.stage]);"
            )

        WebDriverWait(driver, 30).until(lambda d: [job_id, "save"] in stages(d))
        assert {"save", "profile"} <= {
            stage for _, stage in stages(driver)
        }  # this and the tuned job
        assert driver.execute_script("return document.getElementById('error').textContent") == ""
    finally:
        driver.quit()


def test_a_job_worker_runs_below_the_service_priority(tmp_path) -> None:
    """Status requests are answered first: the worker a service job is built in lowers its
    own CPU priority by the spec's niceness before it starts anything (the tuning's build
    workers inherit it)."""
    code = (
        "import os, sys\n"
        "from service.jobs import ServiceJobSpec\n"
        "before = os.nice(0)\n"
        f"ServiceJobSpec('j', 'm.onnx', {str(tmp_path)!r}, None, 'local', niceness=7)()\n"
        "print(os.nice(0) - before)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split()[-1] == "7", done.stderr[-2000:]
