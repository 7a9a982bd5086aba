"""Whole runs in simulated time: interleaving, exclusivity, idle time, faults."""

from __future__ import annotations

import random

import pytest
from scheduler_helpers import THESIS, by_job, find

from scheduler import FailureCause, Resource, client, devices
from scheduler.simulate import simulate
from scheduler.testing import MockJob
from scheduler.trace import Trace

EXCLUSIVE_POLICIES = ("round-robin", "sequential", "predictive")


def test_round_robin_interleaves_like_thesis_figure_10() -> None:
    """Two jobs, one client, one device; build is shorter than profile."""
    durations = {"select": 1.0, "build": 1.0, "profile": 4.0, "update": 1.0}
    jobs = [MockJob(name, iterations=2, durations=durations) for name in ("A", "B")]
    trace = simulate(jobs, [client(), *devices()], "round-robin")
    assert not trace.failed and trace.overlaps() == []
    # A selects first, then B: the client alternates between the jobs.
    assert find(trace, "A", "select").start == 0.0
    assert find(trace, "B", "select").start == 1.0
    assert find(trace, "A", "build").start == 2.0
    # (1) A profiles on the device while B builds on the client.
    assert find(trace, "A", "profile").start == find(trace, "B", "build").start == 3.0
    # (2) B is ready to profile at 4 but waits until A's profile ends.
    assert find(trace, "B", "build").end == 4.0
    assert find(trace, "B", "profile").start == find(trace, "A", "profile").end == 7.0
    # A's update runs beside B's profile; (3) then A starts its next iteration.
    assert find(trace, "A", "update").start == 7.0
    assert find(trace, "A", "select", iteration=1).start == 8.0
    # In iteration 1 it is A's turn to wait: ready at 10, profiles when B's ends at 11.
    assert find(trace, "A", "build", iteration=1).end == 10.0
    assert find(trace, "A", "profile", iteration=1).start == find(trace, "B", "profile").end == 11.0


def random_jobs(rng: random.Random) -> tuple[list[MockJob], list[Resource], dict[str, float]]:
    """Jobs of random shape over two device keys, one of them with several devices."""
    jobs, arrivals = [], {}
    for i in range(rng.randint(1, 7)):
        durations = {kind: rng.choice([0.0, rng.uniform(0.1, 50.0)]) for kind in THESIS}
        key = rng.choice(["gpu", "gpu", "arm"])
        jobs.append(
            MockJob(
                f"j{i}",
                tasks=rng.randint(1, 2),
                iterations=rng.randint(1, 4),
                durations=durations,
                resources={"profile": f"device:{key}"},
            )
        )
        if rng.random() < 0.3:
            arrivals[f"j{i}"] = rng.uniform(0, 200)
    resources = [
        client(capacity=rng.randint(1, 2)),
        *devices("gpu", rng.randint(1, 3)),
        *devices("arm", 1),
    ]
    return jobs, resources, arrivals


def check_exclusive_run(trace: Trace, jobs: list[MockJob]) -> None:
    assert trace.failed == {}
    assert trace.overlaps() == []
    assert len(trace.records) == sum(job.total_stages for job in jobs)
    for records in by_job(trace).values():  # a job's stages run one after another
        assert all(a.end <= b.start for a, b in zip(records, records[1:]))
    for resource in trace.resources:  # never more stages than capacity
        events = sorted(
            [(r.start, 1) for r in trace.records if r.resource == resource.name]
            + [(r.end, -1) for r in trace.records if r.resource == resource.name]
        )
        level = 0
        for _, step in events:
            level += step
            assert level <= resource.capacity


@pytest.mark.parametrize("policy", EXCLUSIVE_POLICIES)
def test_no_device_ever_profiles_two_jobs_at_once(policy: str) -> None:
    rng = random.Random(20190)
    for _ in range(40):
        jobs, resources, arrivals = random_jobs(rng)
        trace = simulate(jobs, resources, policy, arrivals=arrivals)
        check_exclusive_run(trace, jobs)
        for job, at in arrivals.items():
            assert min(r.start for r in trace.records if r.job == job) >= at


def test_several_devices_of_one_key_are_all_used() -> None:
    jobs = [MockJob(f"j{i}", iterations=3, durations=THESIS) for i in range(6)]
    trace = simulate(jobs, [client(capacity=4), *devices("default", 3)], "round-robin")
    check_exclusive_run(trace, jobs)
    assert {r.resource for r in trace.records if r.stage == "profile"} == {
        "default0",
        "default1",
        "default2",
    }


def test_synchronous_overlaps_on_purpose_and_says_so() -> None:
    jobs = [MockJob(f"j{i}", iterations=2, durations=THESIS) for i in range(3)]
    trace = simulate(jobs, [client(), *devices("default", 2)], "synchronous")
    assert trace.failed == {}
    assert trace.exclusive is False
    assert len(trace.overlaps()) == 3 * 2  # three pairs of concurrent profiles per iteration
    # Time slicing: three concurrent profiles of 39.5 s all end after 118.5 s.
    profiles = [r for r in trace.records if r.stage == "profile" and r.iteration == 0]
    assert {r.resource for r in profiles} == {"default0"}
    assert all(r.end - r.start == pytest.approx(3 * 39.5) for r in profiles)


def test_sequential_reproduces_the_single_job_idle_fractions() -> None:
    """Thesis 3.4.1 measured 45% client and 55% device idle time; the stage means give 43%/57%."""
    trace = simulate(
        [MockJob("resnet18", tasks=12, iterations=5, durations=THESIS)],
        [client(), *devices()],
        "sequential",
    )
    utilization = trace.utilization()
    client_idle, device_idle = 1 - utilization["client"], 1 - utilization["default0"]
    assert client_idle == pytest.approx(39.5 / 91.8)
    assert device_idle == pytest.approx(52.3 / 91.8)
    assert client_idle == pytest.approx(0.45, abs=0.025)
    assert device_idle == pytest.approx(0.55, abs=0.025)


def test_interleaving_beats_sequential_by_the_client_bound() -> None:
    jobs = lambda: [MockJob(f"j{i}", iterations=5, durations=THESIS) for i in range(8)]  # noqa: E731
    resources = [client(), *devices()]
    sequential = simulate(jobs(), resources, "sequential").makespan
    interleaved = simulate(jobs(), resources, "round-robin").makespan
    assert sequential == pytest.approx(8 * 5 * 91.8)
    assert interleaved == pytest.approx(8 * 5 * 52.3, rel=0.02)  # the client's own work


def heterogeneous_jobs() -> list[MockJob]:
    device_heavy = {"select": 1.0, "build": 1.0, "profile": 30.0, "update": 1.0}
    client_heavy = {"select": 20.0, "build": 10.0, "profile": 1.0, "update": 20.0}
    return [MockJob(f"c{i}", iterations=10, durations=client_heavy) for i in range(2)] + [
        MockJob(f"d{i}", iterations=10, durations=device_heavy) for i in range(4)
    ]


def test_predictive_is_no_slower_than_round_robin_on_heterogeneous_jobs() -> None:
    resources = [client(), *devices("default", 2)]
    round_robin = simulate(heterogeneous_jobs(), resources, "round-robin")
    predictive = simulate(heterogeneous_jobs(), resources, "predictive")
    check_exclusive_run(predictive, heterogeneous_jobs())
    assert predictive.makespan <= round_robin.makespan
    assert predictive.makespan < 0.95 * round_robin.makespan  # 1131 s against 1206 s


def test_predictive_is_no_slower_than_round_robin_on_random_sets_on_average() -> None:
    makespans: dict[str, float] = {"predictive": 0.0, "round-robin": 0.0}
    for seed in range(30):
        for policy in makespans:
            jobs, resources, _ = random_jobs(random.Random(seed))
            makespans[policy] += simulate(jobs, resources, policy).makespan
    assert makespans["predictive"] <= makespans["round-robin"]


def test_a_job_arriving_mid_run_joins_the_interleaving() -> None:
    jobs = [MockJob(f"j{i}", iterations=4, durations=THESIS) for i in range(2)] + [
        MockJob("late", iterations=2, durations=THESIS)
    ]
    trace = simulate(jobs, [client(), *devices()], "round-robin", arrivals={"late": 100.0})
    check_exclusive_run(trace, jobs)
    late = by_job(trace)["late"]
    assert late[0].start >= 100.0
    assert late[0].start < max(
        r.end for r in trace.records if r.job != "late"
    )  # others still running
    assert trace.jobs["late"].arrived == 100.0


def test_a_stage_that_raises_fails_only_its_job() -> None:
    jobs = [MockJob(f"j{i}", iterations=3, durations=THESIS) for i in range(3)]
    jobs[1].fail_at = {(0, 1, "build")}
    trace = simulate(jobs, [client(), *devices()], "round-robin")
    assert list(trace.failed) == ["j1"]
    assert (
        "build on client: RuntimeError: injected failure in build of task 0 iteration 1"
        in trace.failed["j1"]
    )
    assert [r.status for r in trace.records if r.status != "ok"] == ["error"]
    assert {j for j, o in trace.jobs.items() if o.status == "done"} == {"j0", "j2"}
    assert not [r for r in trace.records if r.job == "j1" and r.start > trace.jobs["j1"].finished]


def test_a_dead_device_is_taken_out_of_rotation() -> None:
    jobs = [
        MockJob(f"j{i}", iterations=3, durations=THESIS, fail_on={"default0"}) for i in range(6)
    ]
    trace = simulate(
        jobs, [client(), *devices("default", 2)], "round-robin", max_consecutive_failures=2
    )
    assert trace.retired == {"default0": "2 consecutive failed stages"}
    assert len(trace.failed) == 2 and all("default0 is down" in e for e in trace.failed.values())
    failed_on_dead = [r for r in trace.records if r.resource == "default0"]
    assert [r.status for r in failed_on_dead] == ["error", "error"]
    survivors = [r for r in trace.records if r.stage == "profile" and r.status == "ok"]
    assert {r.resource for r in survivors} == {"default1"} and len(survivors) == 4 * 3
    assert trace.overlaps() == []


def test_jobs_fail_with_a_reason_when_no_device_is_left() -> None:
    jobs = [MockJob(f"j{i}", durations=THESIS, fail_on={"default0"}) for i in range(3)]
    trace = simulate(jobs, [client(), *devices()], "round-robin", max_consecutive_failures=1)
    assert len(trace.failed) == 3
    assert "default0 is down" in trace.failed["j0"]
    assert "no resource in rotation for 'device:default'" in trace.failed["j2"]


def test_a_job_needing_an_unknown_role_fails_and_the_rest_run() -> None:
    jobs = [MockJob("tpu", resources={"profile": "device:tpu"}), MockJob("gpu")]
    trace = simulate(jobs, [client(), *devices()], "sequential")
    assert list(trace.failed) == ["tpu"]
    assert "no resource in rotation for 'device:tpu'" in trace.failed["tpu"]
    assert trace.jobs["gpu"].status == "done"
    failure = trace.jobs["tpu"].failure
    assert (failure.stage, failure.resource, failure.cause) == (
        "profile",
        None,
        FailureCause.RESOURCE,
    )
    assert str(failure) == failure.message == trace.failed["tpu"]
