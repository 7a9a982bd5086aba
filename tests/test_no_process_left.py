"""Nothing left behind: superb, a scheduler script and the service, each SIGKILLed while
it tunes, take every process they started with them (job workers, fork server, resource
tracker, MetaSchedule's build workers, RPC tracker and servers).

Each runs in a session of its own; its descendants are recorded (psutil keeps each one's
start time), so neither a reused pid nor another test's processes can confuse the check.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from simpletvm.testing import tiny_cnn_onnx

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TUNING_STARTS_S = 180.0  # until a job's build workers exist (TVM imports, on a busy host)
# they end within a second or two; the bound stays below a build stage (64 candidates, the
# service's 16 take about 10 s), which a job that notices its owner gone only when the
# stage ends would outlast
GONE_WITHIN_S = 5.0


def test_a_killed_sweep_leaves_no_process(tmp_path):
    """A tuned run: its job's process from the fork server, the local RPC devices."""
    model = tiny_cnn_onnx(tmp_path / "tiny.onnx")
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        textwrap.dedent(f"""
            name: killed
            fixed: {{model: {model}, total_trials: 1000, candidates_per_iteration: 64,
                     population: 64, genetic_iterations: 1, transfer_learning: false, seed: 0,
                     remeasure: 0}}
            grid: {{trials: [500]}}
        """)
    )
    _kill_while_tuning(
        [sys.executable, "-m", "superb", "run", str(grid), "--store", str(tmp_path / "store")],
        tmp_path,
    )


def test_a_killed_scheduler_leaves_no_process(tmp_path):
    """The README's way: a tracker and server of its own, a job in a spawned worker."""
    model = tiny_cnn_onnx(tmp_path / "tiny.onnx")
    script = tmp_path / "tune.py"
    script.write_text(
        textwrap.dedent(f"""
            from scheduler import Scheduler, client, devices
            from scheduler.tuning import TuningJobSpec
            from simpletvm.remote.rpc import LocalRPC

            if __name__ == "__main__":
                with LocalRPC(["cpu0"]) as rpc:
                    with Scheduler([client(), *devices("cpu0", 1)]) as scheduler:
                        scheduler.submit(TuningJobSpec(
                            "tiny", {str(model)!r}, rpc.address, "cpu0",
                            store={str(tmp_path / "store")!r},
                            tuning={{"trials": 500, "candidates_per_iteration": 64,
                                    "population": 64, "genetic_iterations": 1, "seed": 0,
                                    "transfer_learning": False}},
                        ))
                        scheduler.run()
        """)
    )
    _kill_while_tuning([sys.executable, str(script)], tmp_path)


def test_a_killed_service_leaves_no_process(tmp_path):
    """One submitted job, tuning in the service's scheduler."""
    import httpx

    model = tiny_cnn_onnx(tmp_path / "tiny.onnx")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"

    def submit(process: subprocess.Popen) -> None:
        deadline = time.monotonic() + TUNING_STARTS_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with open(model, "rb") as upload:
                    response = httpx.post(
                        url + "/api/v1/jobs",
                        files={"file": ("tiny.onnx", upload)},
                        data={"trials": "500"},
                        timeout=30,
                    )
                assert response.status_code < 300, response.text
                return
            except httpx.TransportError:  # not listening yet
                time.sleep(0.3)

    serve = ["-m", "service.cli", "serve", "--port", str(port), "--store", str(tmp_path / "store")]
    _kill_while_tuning([sys.executable, *serve], tmp_path, submit)


def _kill_while_tuning(command: list[str], tmp_path: Path, then=None) -> None:
    """Start ``command`` in a session of its own, wait until a job's build workers exist,
    record its descendants, SIGKILL the top process alone, and fail naming whatever of
    them is still there ``GONE_WITHIN_S`` later."""
    log = tmp_path / "output.log"
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    recorded: list[psutil.Process] = []
    try:
        if then is not None:
            then(process)
        deadline = time.monotonic() + TUNING_STARTS_S
        while not _tuning(recorded := _descendants(process.pid)):
            assert process.poll() is None, f"it exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no build workers: {log.read_text()[-3000:]}"
            time.sleep(0.2)
        recorded = _descendants(process.pid)  # what started meanwhile too
        process.kill()
        process.wait()
        deadline = time.monotonic() + GONE_WITHIN_S
        while (left := _still_there(recorded, process.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, "left behind:\n" + "\n".join(
            f"{p.pid} {_command(p)}" for p in sorted(left, key=lambda p: p.pid)
        )
    finally:  # a failure leaves nothing running either
        if process.poll() is None:
            process.kill()
            process.wait()
        for leftover in _still_there(recorded, process.pid):
            with contextlib.suppress(psutil.Error):
                leftover.kill()  # psutil checks the pid still names the recorded process


def _tuning(tree: list[psutil.Process]) -> bool:
    """Whether a job's process (a multiprocessing worker) has started TVM workers (its
    builder's: the RPC tracker's and servers' have another parent)."""
    commands = {p.pid: _command(p) for p in tree}
    return any(
        "tvm.exec.popen_worker" in commands[p.pid]
        and "multiprocessing" in commands.get(_parent(p), "")
        for p in tree
    )


def _descendants(root: int) -> list[psutil.Process]:
    """``root``'s live descendants (psutil keeps each one's start time, so a reused pid
    is never taken for it)."""
    try:
        return psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _still_there(recorded: list[psutil.Process], session: int) -> list[psutil.Process]:
    """The recorded processes still running (not zombies, not their pid reused), and any
    other process of the killed process's session (started after the record)."""
    left = {p.pid: p for p in recorded if _alive(p)}
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if process.pid != session and os.getsid(process.pid) == session and _alive(process):
                left.setdefault(process.pid, process)
    return list(left.values())


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _parent(process: psutil.Process) -> int:
    try:
        return process.ppid()
    except psutil.Error:
        return 0


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())[:200]
    except psutil.Error:
        return "?"
