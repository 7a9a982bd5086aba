"""Run each job in its own Ray actor, on this machine or across a Ray cluster.

Ray is an optional extra (``pip install 'simpletvm[ray]'``). This module imports it
only when a :class:`RayBackend` is made, so naming another backend never loads Ray.

One actor per job holds the job for its whole life: the actor builds the job from its
picklable factory (real jobs cannot be pickled) and runs each stage the scheduler
starts. The futures come from ``ObjectRef.future()``, relayed so that the loop sees the
same failures as with local processes: the stage's own exception, or
:class:`~scheduler.errors.WorkerDied` when the actor's process is gone.

Placement across nodes. A job's select, build and update run where its actor lives,
and an actor cannot move: it holds the job's search state and cost model. So client
capacity belongs to a node, and each job is pinned to one node when it arrives:

- :meth:`RayBackend.clients` describes the cluster as one client resource per live
  node, role ``client:<node>`` (``<node>`` is the node's IP, with a node id prefix
  where several nodes share an IP);
- given such resources, the backend places each new job on the live node with the
  fewest jobs per client slot, creates its actor there (``NodeAffinitySchedulingStrategy``),
  and has the actor report the job's ``client`` stages under that node's role, so the
  policies, unchanged, give them only that node's slots;
- given a plain ``client()`` resource instead, Ray places the actors where it likes and
  that resource's capacity counts for the whole cluster.

Actors reserve no Ray CPUs (``num_cpus=0``): the scheduler's resources, not Ray's, keep
stages from interfering. Profile stages need no placement: they reach their device
through the RPC tracker from wherever the job lives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from scheduler.backends.base import (
    Backend,
    StageOutcome,
    as_factory,
    close_job,
    execute_stage,
    first_stage,
)
from scheduler.base import CLIENT, Job, JobFactory, Resource, Stage
from scheduler.errors import WorkerDied

INSTALL_HINT = "pip install 'simpletvm[ray]'"
CLOSE_TIMEOUT_S = 10.0  # a released job's close() before its actor is killed


class JobActor:
    """The body of one job's actor: builds the job where it runs and keeps it there.

    ``client_role`` is the role the job's ``client`` stages are reported under: the
    role of its node's client resource when the job is pinned, else ``client``.
    """

    def __init__(self, client_role: str = CLIENT) -> None:
        self._client_role = client_role
        self._job: Job | None = None

    def construct(self, factory: JobFactory) -> Stage | None:
        self._job = factory()
        return self._to_scheduler(first_stage(self._job))

    def run_stage(self, stage: Stage, resource_name: str) -> StageOutcome:
        assert self._job is not None, "actor has no job"
        if stage.resource == self._client_role:
            stage = replace(stage, resource=CLIENT)
        outcome = execute_stage(self._job, stage, resource_name)
        return replace(outcome, next_stage=self._to_scheduler(outcome.next_stage))

    def close(self) -> None:
        if self._job is not None:
            close_job(self._job)
            self._job = None

    def _to_scheduler(self, stage: Stage | None) -> Stage | None:
        if stage is None or stage.resource != CLIENT:
            return stage
        return replace(stage, resource=self._client_role)


@dataclass
class _Node:
    """A node jobs may be pinned to, through the client resources of its role."""

    node_id: str
    slots: int


def _node_labels(nodes: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Node id -> the name used in its client role, for the live nodes of ``ray.nodes()``.

    The IP says where a node is; only nodes that share one (several raylets on one
    host) also get a node id prefix.
    """
    alive = sorted((n["NodeManagerAddress"], n["NodeID"]) for n in nodes if n["Alive"])
    ips = [ip for ip, _ in alive]
    return {node_id: ip if ips.count(ip) == 1 else f"{ip}/{node_id[:8]}" for ip, node_id in alive}


def _death_reason(error: Exception) -> str:
    """One line from Ray's account of an actor's death: why, and on which host."""
    text = str(error)
    because = re.search(r"The actor is dead because .*?(?=\.\s|\.?$)", text, re.MULTILINE)
    where = re.search(r"^\s*ip: (\S+)", text, re.MULTILINE)
    reason = because.group(0) if because else (text.strip().splitlines() or ["no details"])[0]
    return f"{type(error).__name__}: {reason}" + (f", on {where.group(1)}" if where else "")


class RayBackend(Backend):
    """One Ray actor per job, on a local Ray instance or a cluster.

    ``address=None`` starts a local instance (``num_cpus`` defaults to this machine's
    count); ``"auto"`` joins the cluster this host belongs to, and ``"ray://host:10001"``
    a remote one through Ray Client. If this process is already connected to Ray, the
    backend uses that connection. ``init_options`` go to ``ray.init`` (for example a
    ``runtime_env``). :meth:`close` shuts Ray down only if this backend started it.

    Every node that runs jobs needs this package (and, for tuning jobs, TVM) installed.
    """

    name = "ray"

    def __init__(
        self, address: str | None = None, num_cpus: int | None = None, **init_options: Any
    ) -> None:
        try:
            import ray
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        except ImportError as exc:
            raise ImportError(f"the ray backend needs Ray: {INSTALL_HINT}") from exc
        self._ray = ray
        self._on_node = NodeAffinitySchedulingStrategy
        self._started = not ray.is_initialized()
        if self._started:
            options = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": "warning",
            }
            ray.init(address, num_cpus=num_cpus, **{**options, **init_options})
        self._actor_class = ray.remote(JobActor)
        self._actors: dict[str, Any] = {}
        self._nodes: dict[str, _Node] = {}
        self._pinned: dict[str, str] = {}

    def clients(self, capacity: int = 1) -> list[Resource]:
        """One client resource per live node; pass them to the scheduler to pin jobs to nodes.

        ``capacity`` is how many client stages a node runs at once: 1 keeps one job's
        build from slowing another's on the same host.
        """
        labels = _node_labels(self._ray.nodes()).values()
        return [Resource(f"{CLIENT}@{label}", f"{CLIENT}:{label}", capacity) for label in labels]

    def bind(self, resources: Sequence[Resource]) -> None:
        """Find the node of every per-node client resource; jobs are placed among them."""
        by_label = {label: node_id for node_id, label in _node_labels(self._ray.nodes()).items()}
        self._nodes = {}
        for resource in resources:
            if resource.kind != CLIENT or resource.role == CLIENT:
                continue
            label = resource.role.split(":", 1)[1]
            if label not in by_label:
                raise ValueError(
                    f"client resource {resource.name!r}: no live Ray node {label!r} "
                    f"(nodes: {', '.join(sorted(by_label))})"
                )
            node = self._nodes.setdefault(resource.role, _Node(by_label[label], 0))
            node.slots += resource.capacity

    def add_job(self, job_id: str, job: Job | JobFactory) -> Future[Stage | None]:
        options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0}
        role = CLIENT
        if self._nodes:
            role = self._place()
            options["scheduling_strategy"] = self._on_node(self._nodes[role].node_id, soft=False)
            self._pinned[job_id] = role
        actor = self._actor_class.options(**options).remote(role)
        self._actors[job_id] = actor
        return self._relay(actor.construct.remote(as_factory(job)))

    def run_stage(self, job_id: str, stage: Stage, resource: Resource) -> Future[StageOutcome]:
        return self._relay(self._actors[job_id].run_stage.remote(stage, resource.name))

    def cancel(self, job_id: str) -> None:
        actor = self._actors.get(job_id)
        if actor is not None:
            self._ray.kill(actor, no_restart=True)

    def release(self, job_id: str) -> None:
        self._pinned.pop(job_id, None)
        actor = self._actors.pop(job_id, None)
        if actor is not None:
            try:  # a killed actor runs no cleanup: the job's first
                self._ray.get(actor.close.remote(), timeout=CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - dead or stuck: killed all the same
                pass
            self._ray.kill(actor, no_restart=True)

    def close(self) -> None:
        for job_id in list(self._actors):
            self.release(job_id)
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()

    def _place(self) -> str:
        """The client role of the live node with the fewest jobs per slot (first on ties)."""
        alive = {n["NodeID"] for n in self._ray.nodes() if n["Alive"]}
        candidates = [role for role, node in self._nodes.items() if node.node_id in alive]
        if not candidates:
            raise RuntimeError(
                f"no live Ray node for the client resources ({', '.join(self._nodes)})"
            )
        jobs = list(self._pinned.values())
        return min(candidates, key=lambda role: jobs.count(role) / self._nodes[role].slots)

    def _relay(self, ref: Any) -> Future:
        """A future that settles with ``ref``'s value, or its failure in the loop's terms."""
        relayed: Future = Future()
        errors = self._ray.exceptions

        def settle(done: Future) -> None:
            try:
                relayed.set_result(done.result())
            except errors.RayActorError as exc:
                relayed.set_exception(WorkerDied(_death_reason(exc)))
            except errors.RayTaskError as exc:
                relayed.set_exception(exc.cause if isinstance(exc.cause, BaseException) else exc)
            except BaseException as exc:  # noqa: BLE001 - the caller sees what the actor raised
                relayed.set_exception(exc)

        ref.future().add_done_callback(settle)
        return relayed
