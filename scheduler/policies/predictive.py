"""A policy that predicts stage durations and keeps the bottleneck device fed."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from itertools import islice

from scheduler.base import DEVICE, Stage, kind_of
from scheduler.policies.base import Policy, Start
from scheduler.state import JobRecord, JobStatus, State

_LOOKAHEAD = 16


@dataclass
class _Outlook:
    """What the policy predicts for a job from its current stage on."""

    stage: Stage
    lead: float = 0.0
    device_stage: Stage | None = None
    cycle_client: float = 0.0
    cycle_device: dict[str, float] = field(default_factory=dict)


class Predictive(Policy):
    """Round-robin with two refinements that use predicted stage durations.

    It learns from finished stages how long each (job, stage name) takes (mean of the
    measurements; before any, the stage's own ``estimate``, then the mean over all
    jobs for that stage name, then ``prior``) and which stage follows which. From that it
    predicts, for every job, its *lead* (client work left before its next device
    stage) and its *cycle* (client and device work of one round of its stages).

    1. Run to the device: a job that just finished a client stage and needs the client
       again goes first, so its client work reaches the device in one block and jobs
       alternate between client and device instead of moving in lockstep (under
       round-robin, two jobs on two devices profile at once while the client idles).
    2. Feed a bottleneck device just in time. A device role is the *bottleneck* when
       the unfinished jobs' cycles load it more than the client. For such a role the
       policy predicts the *window* (how long until a device runs out of work: running
       stages, stages queued for it, client stages already heading there) and the
       *feeder* (the ready job with the shortest lead). A free client slot goes to the
       first job in order whose stage still leaves the feeder time to reach the device
       before the window closes, or else to the feeder. While the client is the
       bottleneck this rule stays off: favouring short leads there would only starve
       the other jobs into a longer tail.

    Devices take their queue in order.
    """

    name = "predictive"

    def __init__(self, prior: float = 1.0) -> None:
        if prior <= 0:
            raise ValueError("prior must be > 0 seconds")
        self.prior = prior
        self._total: dict[tuple[str, str], float] = {}
        self._count: dict[tuple[str, str], int] = {}
        self._name_total: dict[str, float] = {}
        self._name_count: dict[str, int] = {}
        self._follows: dict[tuple[str, str], Stage] = {}
        self._name_follows: dict[str, Stage] = {}
        self._outlooks: dict[str, _Outlook] = {}
        self._continuing: set[str] = set()
        self._cycles: dict[str, tuple[float, dict[str, float]]] = {}
        self._client_load = 0.0
        self._device_load: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"Predictive(prior={self.prior})"

    def stage_finished(
        self, job_id: str, stage: Stage, next_stage: Stage | None, duration: float
    ) -> None:
        key = (job_id, stage.name)
        self._total[key] = self._total.get(key, 0.0) + duration
        self._count[key] = self._count.get(key, 0) + 1
        self._name_total[stage.name] = self._name_total.get(stage.name, 0.0) + duration
        self._name_count[stage.name] = self._name_count.get(stage.name, 0) + 1
        if next_stage is not None:
            self._follows[key] = next_stage
            self._name_follows[stage.name] = next_stage
        self._outlooks.pop(job_id, None)
        if next_stage is None:
            return
        if stage.resource_kind != DEVICE and next_stage.resource_kind != DEVICE:
            self._continuing.add(job_id)
        else:
            self._continuing.discard(job_id)
        outlook = self.outlook(job_id, next_stage)
        self._set_cycle(job_id, (outlook.cycle_client, outlook.cycle_device))

    def job_removed(self, job_id: str) -> None:
        self._set_cycle(job_id, None)
        self._continuing.discard(job_id)
        self._outlooks.pop(job_id, None)

    def _set_cycle(self, job_id: str, cycle: tuple[float, dict[str, float]] | None) -> None:
        """Keep the summed cycle loads current as one job's cycle changes."""
        old = self._cycles.pop(job_id, None)
        for sign, entry in ((-1.0, old), (1.0, cycle)):
            if entry is None:
                continue
            self._client_load += sign * entry[0]
            for role, seconds in entry[1].items():
                self._device_load[role] = self._device_load.get(role, 0.0) + sign * seconds
        if cycle is not None:
            self._cycles[job_id] = cycle

    def estimate(self, job_id: str, stage: Stage) -> float:
        """Predicted seconds for ``stage`` of ``job_id``."""
        count = self._count.get((job_id, stage.name))
        if count:
            return self._total[(job_id, stage.name)] / count
        if stage.estimate is not None:
            return stage.estimate
        count = self._name_count.get(stage.name)
        if count:
            return self._name_total[stage.name] / count
        return self.prior

    def outlook(self, job_id: str, stage: Stage) -> _Outlook:
        """Lead and cycle of ``job_id`` from ``stage``; unknown parts stay empty.

        The lead's device stage is None, and the cycle empty, until the policy has
        seen which stages follow which.
        """
        cached = self._outlooks.get(job_id)
        if cached is not None and cached.stage is stage:
            return cached
        outlook = _Outlook(stage)
        current: Stage | None = stage
        client, device = 0.0, {}
        for _ in range(_LOOKAHEAD):
            assert current is not None
            seconds = self.estimate(job_id, current)
            if current.resource_kind == DEVICE:
                outlook.device_stage = outlook.device_stage or current
                device[current.resource] = device.get(current.resource, 0.0) + seconds
            else:
                client += seconds
                if outlook.device_stage is None:
                    outlook.lead += seconds
            current = self._follows.get((job_id, current.name)) or self._name_follows.get(
                current.name
            )
            if current is None:
                break
            if current.name == stage.name:
                outlook.cycle_client, outlook.cycle_device = client, device
                break
        self._outlooks[job_id] = outlook
        return outlook

    def decide(self, state: State) -> list[Start]:
        starts: list[Start] = []
        for role in state.ready_roles():
            slots = state.pool.slots(role)
            if not slots:
                continue
            if kind_of(role) == DEVICE:
                records = islice(state.ready(role), len(slots))
            else:
                records = self._client_order(state, role, len(slots))
            for record, resource_name in zip(records, slots):
                assert record.stage is not None
                starts.append(Start(record.job_id, record.stage, resource_name))
        return starts

    def _client_order(self, state: State, role: str, count: int) -> list[JobRecord]:
        """The ``count`` ready jobs to start on the client role, best first."""
        continuing = sorted(
            (
                state.jobs[j]
                for j in self._continuing
                if j in state.jobs
                and state.jobs[j].status is JobStatus.READY
                and state.jobs[j].stage is not None
                and state.jobs[j].stage.resource == role
            ),
            key=lambda r: r.order,
        )
        skip = {r.job_id for r in continuing}
        bottlenecks = self._bottlenecks(state, role)
        if not bottlenecks:
            rest = islice(
                (r for r in state.ready(role) if r.job_id not in skip),
                max(0, count - len(continuing)),
            )
            return [*continuing[:count], *rest]
        queue = [*continuing, *(r for r in state.ready(role) if r.job_id not in skip)]
        chosen: list[JobRecord] = []
        while queue and len(chosen) < count:
            record = self._pick(state, queue, chosen, bottlenecks)
            queue.remove(record)
            chosen.append(record)
        return chosen

    def _bottlenecks(self, state: State, client_role: str) -> set[str]:
        """Device roles that the unfinished jobs' cycles load more than the client."""
        capacity = sum(r.capacity for r in state.pool.in_rotation(client_role))
        bottlenecks = set()
        for role, seconds in self._device_load.items():
            count = len(state.pool.in_rotation(role))
            if count and seconds / count > self._client_load / capacity + 1e-9:
                bottlenecks.add(role)
        return bottlenecks

    def _pick(
        self, state: State, queue: list[JobRecord], chosen: list[JobRecord], bottlenecks: set[str]
    ) -> JobRecord:
        feeders: dict[str, tuple[float, JobRecord]] = {}
        for record in queue:
            assert record.stage is not None
            outlook = self.outlook(record.job_id, record.stage)
            if outlook.device_stage is None or outlook.device_stage.resource not in bottlenecks:
                continue
            role = outlook.device_stage.resource
            if role not in feeders or outlook.lead < feeders[role][0]:
                feeders[role] = (outlook.lead, record)
        assert queue[0].stage is not None
        head = self.estimate(queue[0].job_id, queue[0].stage)
        slack, feeder = float("inf"), None
        for role, (lead, record) in feeders.items():
            role_slack = self._window(state, role, chosen, limit=lead + head) - lead
            if role_slack < slack:
                slack, feeder = role_slack, record
        if feeder is None:
            return queue[0]
        for record in queue:
            assert record.stage is not None
            if self.estimate(record.job_id, record.stage) <= slack:
                return record
        return feeder

    def _window(self, state: State, role: str, chosen: list[JobRecord], limit: float) -> float:
        """Predicted seconds until some device of ``role`` has nothing left to run.

        Stops counting once the answer reaches ``limit``: the caller only needs to know
        whether the window is at least that long.
        """
        free_at = {r.name: 0.0 for r in state.pool.in_rotation(role)}
        arrivals: list[tuple[float, float]] = []
        for record in [*state.running.values(), *chosen]:
            assert record.stage is not None
            elapsed = 0.0 if record.started_at is None else state.time - record.started_at
            if record.resource in free_at:
                free_at[record.resource] = max(
                    0.0, self.estimate(record.job_id, record.stage) - elapsed
                )
                continue
            outlook = self.outlook(record.job_id, record.stage)
            if (
                record.stage.resource_kind != DEVICE
                and outlook.device_stage is not None
                and outlook.device_stage.resource == role
            ):
                arrivals.append(
                    (
                        max(0.0, outlook.lead - elapsed),
                        self.estimate(record.job_id, outlook.device_stage),
                    )
                )
        heap = list(free_at.values())
        heapq.heapify(heap)
        for record in state.ready(role):
            if heap[0] >= limit:
                return heap[0]
            assert record.stage is not None
            heapq.heapreplace(heap, heap[0] + self.estimate(record.job_id, record.stage))
        for arrival, seconds in sorted(arrivals):
            if arrival > heap[0] or heap[0] >= limit:
                break
            heapq.heapreplace(heap, heap[0] + seconds)
        return heap[0]
