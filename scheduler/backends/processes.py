"""Run each job in its own long-lived worker process."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import select
import signal
import threading
import time
from concurrent.futures import Future
from typing import Any

from scheduler.backends.base import (
    Backend,
    StageOutcome,
    as_factory,
    close_job,
    execute_stage,
    first_stage,
)
from scheduler.base import Job, JobFactory, Resource, Stage
from scheduler.errors import WorkerDied

STOP_GRACE_S = 3.0


class ProcessBackend(Backend):
    """One worker process per job: the default for real jobs.

    The job is built inside its worker from a picklable factory, because real jobs
    hold state that cannot be pickled, and stays there for all its stages. A job that
    kills its process (segfault, out of memory, :meth:`cancel`) fails alone: the loop
    sees :class:`WorkerDied` on that job's future, as with Ray.

    Each worker leads a process group of its own, so cancelling a job also ends what
    it started (compiler and profiler subprocesses), and kills that group when the
    scheduler's process dies, so a killed scheduler leaves no job behind.
    ``start_method`` defaults to "spawn", which is safe in a process that runs threads;
    "forkserver" with ``preload`` (modules its server imports once) starts workers warm.
    """

    name = "processes"

    def __init__(self, start_method: str = "spawn", preload: tuple[str, ...] = ()) -> None:
        self._context = multiprocessing.get_context(start_method)
        if preload:
            self._context.set_forkserver_preload(list(preload))
            # start the server (and its imports) now, so no job's first stage pays for it
            ready = self._context.Process(target=_nothing, name="scheduler-warm-up")
            ready.start()
            ready.join()
        self._workers: dict[str, _Worker] = {}

    def add_job(self, job_id: str, job: Job | JobFactory) -> Future[Stage | None]:
        worker = _Worker(self._context, job_id)
        self._workers[job_id] = worker
        return worker.request(("construct", as_factory(job)))

    def run_stage(self, job_id: str, stage: Stage, resource: Resource) -> Future[StageOutcome]:
        return self._workers[job_id].request(("stage", stage, resource.name))

    def pid(self, job_id: str) -> int | None:
        """The process that holds ``job_id`` (None once released)."""
        worker = self._workers.get(job_id)
        return worker.process.pid if worker else None

    def cancel(self, job_id: str) -> None:
        worker = self._workers.get(job_id)
        if worker is not None:
            worker.kill()

    def release(self, job_id: str) -> None:
        worker = self._workers.pop(job_id, None)
        if worker is not None:
            worker.stop()

    def close(self) -> None:
        for job_id in list(self._workers):
            self.release(job_id)


class _Worker:
    """One job's process, the pipe to it, and the thread that relays its replies."""

    def __init__(self, context, job_id: str) -> None:
        self._conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(child, os.getpid()), name=f"scheduler-job-{job_id}"
        )
        self.process.start()
        child.close()
        self._lock = threading.Lock()
        self._pending: Future | None = None
        self._dead: WorkerDied | None = None
        threading.Thread(target=self._relay, name=f"scheduler-relay-{job_id}", daemon=True).start()

    def request(self, message: tuple) -> Future:
        future: Future = Future()
        with self._lock:
            if self._dead is not None:
                future.set_exception(self._dead)
                return future
            self._pending = future
        try:
            self._conn.send(message)
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
            with self._lock:
                self._pending = None
            if isinstance(exc, OSError):
                exc = self._death()
            future.set_exception(exc)
        return future

    def _relay(self) -> None:
        while True:
            try:
                status, value = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future, self._pending = self._pending, None
            if future is None:
                continue
            if status == "ok":
                future.set_result(value)
            else:
                future.set_exception(value)
        with self._lock:
            self._dead = self._death()
            future, self._pending = self._pending, None
        self._conn.close()
        if future is not None:
            future.set_exception(self._dead)

    def _death(self) -> WorkerDied:
        self.process.join(STOP_GRACE_S)
        code = self.process.exitcode
        if code is not None and code < 0:
            try:
                return WorkerDied(f"killed by {signal.Signals(-code).name}")
            except ValueError:
                return WorkerDied(f"killed by signal {-code}")
        return WorkerDied(f"exit code {code}" if code is not None else "its pipe closed")

    def kill(self) -> None:
        """End the job now, and everything it started."""
        _signal_group(self.process.pid, signal.SIGKILL)

    def stop(self) -> None:
        """End a finished job's process: politely, then not. (Closing our end of the
        pipe would not do: the relay thread's pending read keeps the socket open.)"""
        try:
            self._conn.send(("stop",))
        except OSError:
            pass
        self.process.join(STOP_GRACE_S)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.process.exitcode is None:
                _signal_group(self.process.pid, sig)
                self.process.join(STOP_GRACE_S)
        _signal_group(self.process.pid, signal.SIGKILL)  # what it left running


def _signal_group(pid: int | None, sig: int) -> None:
    if pid is None:
        return
    for send in (os.killpg, os.kill):
        try:
            send(pid, sig)
        except OSError:  # gone already, or not yet a group of its own
            pass


def _nothing() -> None:
    pass


def _serve(conn, owner: int) -> None:
    """A worker's body: build the job, then run the stages it is sent until the pipe closes."""
    os.setsid()
    _die_with(owner)
    job: Job | None = None
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message[0] == "stop":
                return
            try:
                if message[0] == "construct":
                    job = message[1]()
                    reply: Any = first_stage(job)
                else:
                    assert job is not None, "worker has no job"
                    reply = execute_stage(job, message[1], message[2])
                conn.send(("ok", reply))
            except Exception as exc:  # noqa: BLE001 - a job's error fails that job, never the worker loop
                conn.send(("error", _picklable(exc)))
    finally:  # the process ends through os._exit, which runs no cleanup of its own
        if job is not None:
            close_job(job)


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception type may refuse to pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _die_with(owner: int) -> None:
    """SIGKILL this worker's process group (the job and what it started) as soon as the
    scheduler's process ``owner`` ends, from a daemon thread.

    Not PR_SET_PDEATHSIG: that follows the parent, which under "forkserver" is the fork
    server, and the server outlives a killed scheduler for as long as a job runs (every
    job holds its "alive" pipe); under "spawn" it fires when the *thread* that started
    the job ends, though the scheduler lives on.
    """
    try:
        pidfd = os.pidfd_open(owner)
    except ProcessLookupError:  # the owner ended before this worker started
        os.killpg(0, signal.SIGKILL)
    except (AttributeError, OSError):  # no pidfd (not Linux >= 5.3): poll
        pidfd = None

    def watch() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])  # readable once the owner has ended
        else:
            while _exists(owner):
                time.sleep(1.0)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-scheduler", daemon=True).start()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
