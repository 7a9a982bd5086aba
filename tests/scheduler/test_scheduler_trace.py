"""Trace files, utilization, overlap detection and the Gantt chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scheduler_helpers import THESIS

from scheduler import Failure, FailureCause, client, device, devices
from scheduler.simulate import simulate
from scheduler.testing import FakeClock, MockJob
from scheduler.trace import StageRecord, Trace


def small_trace() -> Trace:
    jobs = [MockJob(f"job{i}", iterations=2, durations=THESIS) for i in range(3)]
    jobs[2].fail_at = {(0, 1, "select")}
    return simulate(jobs, [client(), *devices("default", 2)], "round-robin")


def test_csv_round_trip_keeps_every_record(tmp_path: Path) -> None:
    trace = small_trace()
    trace.to_csv(tmp_path / "trace.csv")
    loaded = Trace.from_csv(tmp_path / "trace.csv")
    assert loaded.records == trace.records
    assert {r.name for r in loaded.resources} == {"client", "default0", "default1"}
    assert loaded.utilization() == pytest.approx(trace.utilization())
    assert [f.name for f in tmp_path.iterdir()] == ["trace.csv"]  # no temporary file left


def test_json_round_trip_keeps_everything(tmp_path: Path) -> None:
    trace = small_trace()
    trace.to_json(tmp_path / "trace.json")
    assert Trace.from_json(tmp_path / "trace.json") == trace
    frame = trace.to_frame()
    assert len(frame) == len(trace.records) and frame["status"].tolist().count("error") == 1


def test_a_trace_json_written_before_failures_had_fields_still_loads(tmp_path: Path) -> None:
    trace = small_trace()
    data = trace.to_dict()
    for outcome in data["jobs"].values():  # the earlier shape: a one-line error and a cause
        failure = outcome.pop("failure")
        outcome.update(
            error=str(Failure(**failure)) if failure else "",
            cause=failure["cause"] if failure else None,
        )
    (tmp_path / "old.json").write_text(json.dumps(data))
    loaded = Trace.from_json(tmp_path / "old.json")
    assert loaded.records == trace.records and loaded.failed == trace.failed
    assert loaded.jobs["job2"].failure.cause == FailureCause.STAGE


def test_gantt_png_is_written(tmp_path: Path) -> None:
    path = tmp_path / "charts" / "gantt.png"
    small_trace().gantt_png(path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def record(
    job: str, resource: str, start: float, end: float, role: str = "device:gpu"
) -> StageRecord:
    return StageRecord(job, 0, 0, "profile", resource, role, start, end)


def test_overlaps_find_concurrent_profiles_on_one_device_only() -> None:
    trace = Trace(
        records=[
            record("a", "gpu0", 0, 10),
            record("b", "gpu0", 10, 20),  # back to back: fine
            record("c", "gpu1", 0, 10),
            record("d", "gpu1", 5, 6),  # overlap
            record("e", "client", 0, 10, "client"),
            record("f", "client", 0, 10, "client"),
        ],
        resources=[device("gpu0", "gpu"), device("gpu1", "gpu"), client(capacity=2)],
    )
    assert [(a.job, b.job) for a, b in trace.overlaps()] == [("c", "d")]
    assert trace.overlaps(resource_kind=None) == trace.overlaps()  # the client has capacity 2


def test_utilization_counts_time_busy_up_to_capacity() -> None:
    trace = Trace(
        records=[
            record("a", "gpu0", 0, 10),
            record("b", "gpu0", 5, 15),
            record("c", "gpu0", 30, 40),
            record("e", "client", 0, 20, "client"),
            record("f", "client", 10, 40, "client"),
        ],
        resources=[device("gpu0", "gpu"), client(capacity=2)],
    )
    assert trace.makespan == 40
    assert trace.utilization() == pytest.approx(
        {"gpu0": 25 / 40, "client": (10 + 2 * 10 + 20) / 2 / 40}
    )


def test_fake_clock_moves_only_forward_and_only_when_told() -> None:
    clock = FakeClock(5.0)
    assert clock() == clock.now() == 5.0
    clock.advance(2.5)
    assert clock.now() == 7.5
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)


def test_mock_job_validates_its_configuration() -> None:
    with pytest.raises(ValueError, match="durations lack stage names"):
        MockJob("a", durations={"select": 1.0})
    with pytest.raises(ValueError, match="no resource given"):
        MockJob("a", stage_names=("select", "compile"))
    job = MockJob("a", tasks=2, iterations=3, durations=lambda s: s.iteration + 1.0, estimates=True)
    stage = job.next_stage()
    assert job.total_stages == 24 and stage is not None and stage.estimate == 1.0
    with pytest.raises(ValueError, match="next stage is"):
        job.run_stage(stage.__class__("build", "client"), "client")
