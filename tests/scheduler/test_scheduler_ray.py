"""The Ray backend on a local Ray cluster of two nodes (two raylets on this machine).

One cluster serves the module. The first Ray test starts and stops an instance of its
own instead, before the cluster exists, as ``backend="ray"`` does for a user.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path

import pytest
from scheduler_helpers import by_job

from scheduler import RayBackend, Resource, Scheduler, Stage, StageResult, client, devices
from scheduler.backends.ray import JobActor
from scheduler.testing import STAGE_NAMES, MockJob
from scheduler.tuning import TuningJobSpec, record_writer
from simpletvm.testing import tiny_cnn_onnx
from simpletvm.tuning.record_files import open_records

# one pytest-xdist worker runs every test that starts Ray: two local instances at once
# would race for the same ports
pytestmark = pytest.mark.xdist_group("ray")


def test_a_pinned_actor_reports_client_stages_under_its_node_role() -> None:
    """The actor's role translation, without Ray: the job itself only ever sees ``client``."""
    actor = JobActor("client:10.0.0.2")
    first = actor.construct(functools.partial(MockJob, "a", stage_names=("select", "profile")))
    assert first == Stage("select", "client:10.0.0.2")
    outcome = actor.run_stage(
        first, "client@10.0.0.2"
    )  # MockJob refuses a stage it did not announce
    assert outcome.result.ok and outcome.next_stage == Stage("profile", "device:default")
    assert actor.run_stage(outcome.next_stage, "default0").next_stage is None


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(
        ImportError, match=r"the ray backend needs Ray: pip install 'simpletvm\[ray\]'"
    ):
        Scheduler([client()], backend="ray")


def test_the_named_backend_starts_a_local_ray_and_stops_it() -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("another test's Ray instance is running")
    with Scheduler([client(), *devices("default", 1)], backend="ray") as scheduler:
        scheduler.submit(MockJob("alone", durations=0.001))
        trace = scheduler.run()
        assert ray.is_initialized()
    assert trace.jobs["alone"].status == "done"
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    nodes = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    nodes.add_node(num_cpus=1)
    ray.init(address=nodes.address, log_to_driver=False, logging_level="warning")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    yield nodes
    ray.shutdown()
    nodes.shutdown()


def spans(trace) -> list[tuple[float, float]]:
    return sorted((records[0].start, records[-1].end) for records in by_job(trace).values())


@pytest.mark.parametrize("policy", ["round-robin", "sequential"])
def test_jobs_run_in_their_actors_without_overlapping_profiles(cluster, policy: str) -> None:
    import ray

    given = MockJob("given", iterations=2, durations=0.002)
    with Scheduler([client(), *devices("default", 2)], policy, RayBackend()) as scheduler:
        scheduler.submit(given)
        for i in range(3):
            scheduler.submit(
                functools.partial(MockJob, f"built{i}", iterations=2, durations=0.002),
                job_id=f"built{i}",
            )
        trace = scheduler.run()
    assert ray.is_initialized()  # the backend leaves alone a Ray it did not start
    assert trace.failed == {} and len(trace.jobs) == 4
    assert len(trace.records) == 4 * 8 and trace.overlaps() == []
    assert given.history == []  # the stages ran on a copy inside its actor
    for records in by_job(trace).values():
        assert [(r.iteration, r.stage) for r in records] == [
            (i, k) for i in range(2) for k in STAGE_NAMES
        ]
    if (
        policy == "sequential"
    ):  # one job after another; round-robin's interleaving depends on arrivals
        jobs = spans(trace)
        assert all(a[1] <= b[0] for a, b in zip(jobs, jobs[1:]))


def broken_factory() -> MockJob:
    raise ImportError("no module named tvm")


class Dying(MockJob):
    """Ends its own actor in the stage at ``at``: ``how`` is "exit" (the process exits) or "kill"."""

    def __init__(self, job_id: str, how: str, at: tuple[int, int, str], **kwargs) -> None:
        super().__init__(job_id, **kwargs)
        self.how, self.at = how, at

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        if (stage.task, stage.iteration, stage.name) == self.at:
            if self.how == "exit":
                os._exit(1)
            import ray

            ray.kill(ray.get_runtime_context().current_actor)
            time.sleep(60)  # the kill ends the process before this does
        return super().run_stage(stage, resource_name)


def test_each_fault_fails_only_its_job(cluster) -> None:
    with Scheduler([client(), *devices("default", 1)], "round-robin", RayBackend()) as scheduler:
        scheduler.submit(
            MockJob("raises", iterations=2, durations=0.002, fail_at={(0, 0, "profile")})
        )
        scheduler.submit(Dying("exits", "exit", (0, 0, "profile"), iterations=2, durations=0.002))
        scheduler.submit(Dying("killed", "kill", (0, 0, "build"), iterations=2, durations=0.002))
        scheduler.submit(broken_factory, job_id="factory")
        for i in range(2):
            scheduler.submit(MockJob(f"ok{i}", iterations=2, durations=0.002))
        trace = scheduler.run()
        assert scheduler.state.pool.running == {"client": 0, "default0": 0}
    failed = trace.failed
    assert (
        failed["raises"]
        == "profile on default0: RuntimeError: injected failure in profile of task 0 iteration 0"
    )
    assert failed["factory"] == "could not start: ImportError: no module named tvm"
    assert failed["exits"].startswith(
        "profile on default0: worker process died (ActorDiedError: "
        "The actor is dead because its worker process has died"
    )
    assert failed["killed"].startswith(
        "build on client: worker process died (ActorDiedError: "
        "The actor is dead because it was killed by `ray.kill`"
    )
    assert {job for job, outcome in trace.jobs.items() if outcome.status == "done"} == {
        "ok0",
        "ok1",
    }
    assert trace.overlaps() == [] and trace.retired == {}


def test_a_released_job_is_closed_in_its_actor_before_the_actor_is_killed(
    cluster, tmp_path
) -> None:
    markers = {name: tmp_path / f"{name}.closed" for name in ("done", "failed")}
    with Scheduler([client(), *devices("default", 1)], "round-robin", RayBackend()) as scheduler:
        scheduler.submit(MockJob("done", durations=0.001, closed_marker=markers["done"]))
        scheduler.submit(
            MockJob(
                "failed",
                durations=0.001,
                fail_at={(0, 0, "select")},
                closed_marker=markers["failed"],
            )
        )
        trace = scheduler.run()
    assert {j: o.status for j, o in trace.jobs.items()} == {"done": "done", "failed": "failed"}
    closed_in = {int(path.read_text()) for path in markers.values()}
    assert len(closed_in) == 2 and os.getpid() not in closed_in  # each in its own actor


class Noting(MockJob):
    """Appends ``<job> <resource> <node id>`` to the file ``notes`` for every stage it runs."""

    def __init__(self, job_id: str, notes: str, **kwargs) -> None:
        super().__init__(job_id, **kwargs)
        self.notes = notes

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        import ray

        with open(self.notes, "a") as notes:
            notes.write(
                f"{self.job_id} {resource_name} {ray.get_runtime_context().get_node_id()}\n"
            )
        return super().run_stage(stage, resource_name)


def test_jobs_are_pinned_to_nodes_and_their_client_stages_run_there(
    cluster, tmp_path: Path
) -> None:
    backend = RayBackend()
    clients = backend.clients()
    assert [c.capacity for c in clients] == [1, 1]
    assert all(c.name == "client@" + c.role.split(":", 1)[1] for c in clients)
    notes = tmp_path / "notes.txt"
    with Scheduler([*clients, *devices("default", 1)], "round-robin", backend) as scheduler:
        for i in range(4):
            scheduler.submit(Noting(f"j{i}", str(notes), iterations=2, durations=0.002))
        trace = scheduler.run()
    assert trace.failed == {} and trace.overlaps() == []
    ran = [line.split() for line in notes.read_text().splitlines()]
    assert len(ran) == 4 * 8
    nodes_of_job = {job: {node for j, _, node in ran if j == job} for job in trace.jobs}
    assert all(len(nodes) == 1 for nodes in nodes_of_job.values())  # an actor never moves
    nodes_of_client = {c.name: {node for _, name, node in ran if name == c.name} for c in clients}
    assert [len(nodes) for nodes in nodes_of_client.values()] == [
        1,
        1,
    ]  # a client resource is one node
    assert len(set.union(*nodes_of_client.values())) == 2
    clients_of_job = {
        job: {r.resource for r in records if r.resource_kind == "client"}
        for job, records in by_job(trace).items()
    }
    assert all(len(names) == 1 for names in clients_of_job.values())
    assert sorted(sum(names == {c.name} for names in clients_of_job.values()) for c in clients) == [
        2,
        2,
    ]


def test_a_client_resource_of_no_ray_node_is_refused(cluster) -> None:
    with pytest.raises(
        ValueError, match="client resource 'client@nowhere': no live Ray node 'nowhere'"
    ):
        Scheduler([Resource("client@nowhere", "client:nowhere")], backend=RayBackend())


FAST = {
    "trials": 4,
    "candidates_per_iteration": 4,
    "population": 32,
    "genetic_iterations": 1,
    "seed": 0,
    "transfer_learning": False,
    "remeasure": 1,  # re-timed records reach the driver too
    # a loaded host (two raylets beside the suite's other worker) can take over the default
    # minute to build a candidate; a timed-out one would count as a tuning error here
    "build_timeout": 600.0,
    "timeout": 120.0,
}


@pytest.mark.slow
def test_two_tuning_jobs_tune_on_two_nodes(cluster, tmp_path: Path) -> None:
    from simpletvm.remote.rpc import LocalRPC

    model = str(tiny_cnn_onnx(tmp_path / "tiny.onnx"))
    store = tmp_path / "store"
    backend = RayBackend()
    with LocalRPC(["ray-cpu"], servers=1) as rpc:
        specs = [
            TuningJobSpec(
                f"job{i}",
                model,
                rpc.address,
                "ray-cpu",
                store=str(store),
                run_id=f"{i}" * 32,
                tuning=FAST,
                records_to_driver=True,
            )
            for i in range(2)
        ]
        with Scheduler(
            [*backend.clients(), *devices("ray-cpu", 1)], "round-robin", backend
        ) as scheduler:
            for spec in specs:
                scheduler.submit(spec)
            trace = scheduler.run(on_stage=record_writer(str(store)))
    assert not trace.failed, trace.failed
    # the jobs returned their records with each stage; the driver wrote them all
    records = open_records(store)
    for spec in specs:
        context = json.loads((store / "runs" / spec.run_id / "context.json").read_text())
        measured = context["tuning"]["trials"] - context["tuning"]["errors"]
        assert records.count(run_id=spec.run_id) == measured > 0
    assert trace.overlaps() == []
    for spec in specs:
        assert [r.stage for r in trace.records if r.job == spec.job_id][:4] == [
            "select",
            "build",
            "profile",
            "update",
        ]
        context = json.loads((store / "runs" / spec.run_id / "context.json").read_text())
        assert context["tuning"]["trials"] >= 5 and context["tuning"]["errors"] == 0
    clients = {r.job: r.resource for r in trace.records if r.resource_kind == "client"}
    assert len(set(clients.values())) == 2  # one job per node
