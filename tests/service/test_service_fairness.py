"""Fair sharing in front of the scheduler: users take turns for the job slots, so a user
who submits many jobs does not starve one who submits one (no TVM: a fake scheduler)."""

from __future__ import annotations

import time

from service.db import DONE
from service.runner import Engine


class FakeScheduler:
    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, spec, job_id: str) -> str:
        self.submitted.append(job_id)
        return job_id


def test_users_take_turns_for_the_slots(tmp_path) -> None:
    engine = Engine(tmp_path / "store", max_in_flight=1)
    engine.scheduler = FakeScheduler()
    now = time.time()
    for i in range(5):  # the heavy user submits first, five at once
        engine.table.add_job(
            id=f"a{i}",
            user="alice",
            model="m",
            model_path="m.onnx",
            target="cpu",
            device_key="local",
            created=now + i * 0.001,
        )
    engine.table.add_job(
        id="b0",
        user="bob",
        model="m",
        model_path="m.onnx",
        target="cpu",
        device_key="local",
        created=now + 1,
    )
    engine.table.add_job(
        id="c0",
        user="carol",
        model="m",
        model_path="m.onnx",
        target="cpu",
        device_key="local",
        created=now + 2,
    )
    engine.admit()
    while len(engine.scheduler.submitted) < 7:
        running = engine.scheduler.submitted[-1]
        engine._in_flight.pop(running)
        engine.table.update(running, state=DONE)
        engine.admit()
    assert engine.scheduler.submitted == ["a0", "b0", "c0", "a1", "a2", "a3", "a4"]


def test_two_slots_go_to_two_users_before_a_users_second_job(tmp_path) -> None:
    engine = Engine(tmp_path / "store", max_in_flight=2)
    engine.scheduler = FakeScheduler()
    now = time.time()
    for i in range(3):
        engine.table.add_job(
            id=f"a{i}",
            user="alice",
            model="m",
            model_path="m.onnx",
            target="cpu",
            device_key="local",
            created=now + i * 0.001,
        )
    engine.table.add_job(
        id="b0",
        user="bob",
        model="m",
        model_path="m.onnx",
        target="cpu",
        device_key="local",
        created=now + 1,
    )
    engine.admit()
    assert engine.scheduler.submitted == ["a0", "b0"]
