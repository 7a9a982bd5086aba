"""The service's engine: one scheduler loop in a background thread into which jobs
arrive live, with a fair queue in front of it, and the job table kept up to date.

Fair sharing: at most ``max_in_flight`` jobs are in the scheduler at once (each holds a
worker process). When a slot frees, the next job is the oldest queued job of the user
with the fewest jobs in flight, ties going to the user whose turn is longest ago, so a
user who submits 20 jobs takes turns with one who submits 1 instead of going first 20
times. Inside the scheduler the policy interleaves the admitted jobs' stages; the
devices stay exclusive for profiling. The defaults, four in flight and the predictive
policy, keep the client busiest: with two, the client idles whenever both jobs wait
for the device.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path
from typing import Any

from scheduler import FailureCause, JobStatus, Scheduler, client
from scheduler.tuning import rpc_devices
from service.db import CANCELLED, DONE, FAILED, QUEUED, RUNNING, JobTable
from service.jobs import ServiceJobSpec
from simpletvm.remote.local_devices import LocalDevices
from simpletvm.store import RunStore

log = logging.getLogger("service")
MODULE_FILE = "model.so"
BACKENDS = ("processes", "ray")  # where jobs run: local worker processes or Ray actors


class Engine:
    def __init__(
        self,
        store: str | Path,
        device_keys: tuple[str, ...] = ("local",),
        servers: int = 1,
        tracker: tuple[str, int] | None = None,
        backend: str = "processes",
        policy: str = "predictive",
        max_in_flight: int = 4,
        ray_address: str | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} is unknown: choose {' or '.join(BACKENDS)}")
        self.store = RunStore(store)
        self.dir = self.store.root / "service"
        self.uploads = self.dir / "uploads"
        self.uploads.mkdir(parents=True, exist_ok=True)
        self.table = JobTable(self.dir / "service.sqlite", view=True)  # status from memory
        self.device_keys, self.servers, self.tracker = list(device_keys), servers, tracker
        self.backend_name, self.policy, self.ray_address = backend, policy, ray_address
        self.max_in_flight = max_in_flight
        self.devices: LocalDevices | None = None
        self.scheduler: Scheduler | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._in_flight: dict[str, str] = {}  # job id -> user
        self._turns = itertools.count()
        self._last_turn: dict[str, int] = {}
        self._origin_wall = time.time()
        self._origin_clock = 0.0
        self.error: str | None = None

    # ---- life -----------------------------------------------------------------------
    def start(self) -> Engine:
        from scheduler.backends import ProcessBackend, RayBackend

        if self.tracker is None:
            self.devices = LocalDevices(
                self.device_keys, self.servers, self.dir / "rpc.log", key_per_server=True
            ).start()
            self.tracker = self.devices.address
        if self.backend_name == "ray":
            backend: Any = RayBackend(self.ray_address)
            clients = backend.clients()
        else:
            backend = ProcessBackend(
                "forkserver", preload=("service.jobs", "simpletvm.api", "tvm", "tvm.relax")
            )
            clients = [client()]
        resources = [
            *clients,
            *(d for key in self.device_keys for d in rpc_devices(key, self.servers)),
        ]
        self.scheduler = Scheduler(resources, self.policy, backend)
        self._origin_wall, self._origin_clock = time.time(), self.scheduler.backend.now()
        self._resume()
        self._thread = threading.Thread(target=self._loop, name="service-scheduler", daemon=True)
        self._thread.start()
        self.admit()
        return self

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            if self._thread is not None:
                self._thread.join(30)
            self.scheduler.close()  # the job workers and what they started
        if self.devices is not None:
            self.devices.stop()

    def _loop(self) -> None:
        try:
            self.scheduler.run(on_stage=self._stage_ended, on_job_end=self._job_ended, serve=True)
        except BaseException as error:
            self.error = f"{type(error).__name__}: {error}"
            log.exception("the scheduler loop stopped")

    def _resume(self) -> None:
        """Jobs a killed service left queued or running go back to the queue under their
        run ids (their records say what is measured); one whose module was saved is done."""
        for job in self.table.jobs(states=(QUEUED, RUNNING)):
            if (self.store.module_dir(job["id"]) / MODULE_FILE).exists():
                self.table.update(job["id"], state=DONE, finished=time.time())
            elif job["state"] == RUNNING:
                self.table.update(job["id"], ("resumed", {}), state=QUEUED)

    # ---- the queue ------------------------------------------------------------------
    def admit(self) -> None:
        """Fill free slots from the queue, users taking turns."""
        with self._lock:
            while len(self._in_flight) < self.max_in_flight:
                queued = [
                    j for j in self.table.jobs(states=(QUEUED,)) if j["id"] not in self._in_flight
                ]
                if not queued:
                    return
                first: dict[str, dict] = {}
                for job in queued:
                    first.setdefault(job["user"], job)
                load = {u: sum(1 for v in self._in_flight.values() if v == u) for u in first}
                user = min(
                    first, key=lambda u: (load[u], self._last_turn.get(u, -1), first[u]["created"])
                )
                job = first[user]
                self._last_turn[user] = next(self._turns)
                self._in_flight[job["id"]] = user
                self.table.update(
                    job["id"],
                    ("admitted", {}),
                    state=RUNNING,
                    started=job["started"] or time.time(),
                    attempts=job["attempts"] + 1,
                )
                self.scheduler.submit(self.spec(job), job_id=job["id"])

    def spec(self, job: dict[str, Any]) -> ServiceJobSpec:
        if job["trials"]:
            tuning: dict[str, Any] = {"total_trials": int(job["trials"])}
        elif job["minutes"]:
            tuning = {"minutes": float(job["minutes"])}
        else:
            tuning = {"total_trials": 64}
        return ServiceJobSpec(
            job["id"],
            job["model_path"],
            str(self.store.root),
            tuple(self.tracker) if self.tracker else None,
            job["device_key"],
            job["target"],
            tuning,
            job["latency_ms"],
            bool(job["known_only"]),
            devices_here=self.devices is not None and self.backend_name != "ray",
        )

    def cancel(self, job_id: str) -> None:
        with self._lock:
            if job_id in self._in_flight:
                self.scheduler.cancel(job_id, "cancelled by its user")
                return
            job = self.table.job(job_id)
            if job is not None and job["state"] == QUEUED:
                self.table.update(
                    job_id, state=CANCELLED, finished=time.time(), error="cancelled by its user"
                )

    # ---- listeners (the loop's thread) ----------------------------------------------
    def wall(self, t: float) -> float:
        return self._origin_wall + t

    def _stage_ended(self, job_id: str, record, details: dict[str, Any]) -> None:
        fields: dict[str, Any] = {"stage": record.stage}
        for name in ("trials", "estimate_ms", "progress", "answered_from_store"):
            if details.get(name) is not None:
                fields["trials_done" if name == "trials" else name] = details[name]
        if details.get("answered_from_store") and details.get("known_ms") is not None:
            fields["estimate_ms"] = details["known_ms"]
        self.table.update(
            job_id,
            (
                "stage",
                {
                    "stage": record.stage,
                    "task": record.task,
                    "iteration": record.iteration,
                    "resource": record.resource,
                    "role": record.role,
                    "start": self.wall(record.start),
                    "end": self.wall(record.end),
                    "status": str(record.status),
                    "error": record.error,
                    "trials": details.get("trials"),
                    "estimate_ms": fields.get("estimate_ms"),
                },
            ),
            **fields,
        )

    def _job_ended(self, job_id: str, outcome) -> None:
        with self._lock:
            self._in_flight.pop(job_id, None)
        if outcome.status == JobStatus.DONE:
            self.table.update(job_id, state=DONE, finished=time.time(), stage=None)
        else:
            failure = outcome.failure
            cancelled = failure.cause == FailureCause.CANCELLED
            self.table.update(
                job_id,
                state=CANCELLED if cancelled else FAILED,
                finished=time.time(),
                error=failure.message,
            )
        self.admit()
