"""Runs execute one at a time, each in a process of its own.

Children come from a multiprocessing fork server that imported :mod:`superb.worker`
(SimpleTVM and TVM) once, so isolation costs milliseconds instead of a fresh import per
run. Whatever a child does (raise, segfault, hang), the parent gets an :class:`Outcome`:
``ok``, ``failed`` (an exception, with its message), ``crashed`` (the process died: its
signal or exit code and the last line of its log) or ``timeout``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

STOP_GRACE_S = 3.0


@dataclass
class Outcome:
    status: str  # ok, failed, crashed, timeout
    error: str | None
    run_id: str
    wall_s: float
    simpletvm_s: float | None = None
    context_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class IsolatedRunner:
    """Starts each run's child from a warm fork server and waits for its result.

    Args:
        target: the function a child runs, ``target(spec, conn)`` (tests pass others).
        preload: modules the fork server imports once for all children. A child also
            re-runs the parent's main script, if it has one (the ``superb`` console
            script): superb.cli is preloaded so that costs nothing.
    """

    def __init__(self, target: Callable | None = None,
                 preload: tuple[str, ...] = ("superb.worker", "superb.runner", "superb.cli")):
        self.target = target or _child
        self.mp = multiprocessing.get_context("forkserver")
        self.mp.set_forkserver_preload(list(preload))

    def warm_up(self) -> "IsolatedRunner":
        """Start the fork server now: it imports TVM while the caller does other work."""
        from multiprocessing import forkserver

        forkserver.ensure_running()
        return self

    def wait_ready(self) -> None:
        """Block until the fork server has imported what it preloads (one empty child),
        so that the first run's time does not include it."""
        process = self.mp.Process(target=_ready, name="superb-ready")
        process.start()
        process.join()

    def run(self, spec: dict[str, Any], on_event: Callable[[dict], None] = lambda e: None,
            on_start: Callable[[int], None] = lambda pid: None,
            timeout: float | None = None) -> Outcome:
        """Run one spec; Ctrl-C (KeyboardInterrupt) stops the child and propagates."""
        Path(spec["log"]).parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        reader, writer = self.mp.Pipe(duplex=False)
        process = self.mp.Process(target=self.target, args=(spec, writer), daemon=False,
                                  name=f"superb-run-{spec['key']}")
        try:
            process.start()
            writer.close()
            on_start(process.pid)
            result = self._wait(process, reader, on_event, started, timeout)
        except BaseException:
            self._stop(process)
            raise
        finally:
            reader.close()
        wall = time.monotonic() - started
        if result is None:
            if timeout is not None and wall >= timeout:
                self._stop(process)
                return Outcome("timeout", f"the run took longer than {timeout:g} s and was "
                               "stopped", spec["run_id"], wall)
            process.join(STOP_GRACE_S)
            return Outcome("crashed", _death_text(process.exitcode, spec["log"]),
                           spec["run_id"], wall)
        process.join(STOP_GRACE_S)
        if process.is_alive():  # it reported but does not end: stop it, keep its result
            self._stop(process)
        return Outcome(result["status"], result.get("error"), result.get("run_id",
                       spec["run_id"]), wall, result.get("simpletvm_s"),
                       result.get("context_path"))

    def _wait(self, process, reader, on_event, started, timeout) -> dict | None:
        while True:
            if timeout is not None and time.monotonic() - started >= timeout:
                return None
            try:
                if reader.poll(0.1):
                    event = reader.recv()
                    if event.get("type") == "result":
                        return event
                    on_event(event)
                    continue
            except (EOFError, OSError):
                return None  # the child ended without a result
            if not process.is_alive() and not reader.poll(0):
                return None

    def _stop(self, process) -> None:
        """End a child and everything it started (its own process group)."""
        if process.pid is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if process.exitcode is None:
                _signal(process.pid, sig, group=False)
            _signal(process.pid, sig, group=True)  # what it started, even once it ended
            process.join(STOP_GRACE_S)
        process.join(STOP_GRACE_S)


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except OSError:  # gone already, or not yet a group of its own
        pass


def _ready() -> None:
    pass


def _child(spec: dict[str, Any], conn) -> None:
    """A run's process: the fork server imported superb.worker already."""
    from .worker import child_main

    child_main(spec, conn)


def _death_text(exitcode: int | None, log: str) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        text = f"the run's process died of {name}"
    else:
        text = f"the run's process ended with exit code {exitcode} and no result"
    last = _last_line(log)
    return f"{text}; last output: {last}" if last else text


def _last_line(path: str, limit: int = 300) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8192))
            lines = [line.strip() for line in handle.read().decode(errors="replace")
                     .splitlines() if line.strip()]
    except OSError:
        return ""
    last = lines[-1] if lines else ""
    return last if len(last) <= limit else last[: limit - 3] + "..."
