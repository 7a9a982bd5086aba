"""``simpletvm serve --backend ray``: each job runs in a Ray actor on a local Ray instance
that the service starts and stops, through the same API as with local processes."""

from __future__ import annotations

import pytest
from service_helpers import ServiceProcess
from typer.testing import CliRunner

from simpletvm.cli import app
from simpletvm.client import Client

# one pytest-xdist worker runs every test that starts Ray (see test_scheduler_ray.py):
# two local instances at once would race for the same ports
pytestmark = pytest.mark.xdist_group("ray")


@pytest.mark.slow
def test_a_job_on_ray_finishes_with_its_module_and_its_stages(tmp_path, tiny_model) -> None:
    pytest.importorskip("ray")
    service = ServiceProcess(tmp_path / "store", "--backend", "ray").start()
    try:
        with Client(service.url) as client:
            job_id = client.submit(tiny_model, trials=4)
            job = client.wait(job_id, timeout=300, poll_s=0.2)
            assert job["state"] == "done" and job["trials_done"] == 4, job
            stages = client.trace(job_id)
            assert {s["stage"] for s in stages} >= {"select", "build", "profile", "update", "save"}
            assert all(s["status"] == "ok" for s in stages), stages
            # the job's client stages ran on its Ray node's client slot
            on_client = {s["resource"] for s in stages if not s["role"].startswith("device")}
            assert len(on_client) == 1 and on_client.pop().startswith("client@"), stages
            module = client.fetch(job_id, tmp_path / "module")
            assert sorted(p.name for p in module.iterdir()) == ["metadata.json", "model.so"]
    finally:
        service.stop()
    assert "Traceback" not in service.log.read_text()


def test_an_unknown_backend_is_bad_input() -> None:
    result = CliRunner().invoke(app, ["serve", "--backend", "dask"])
    assert result.exit_code == 2
    assert "--backend 'dask' is unknown: choose processes or ray" in result.output
