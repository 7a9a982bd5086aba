"""Nothing left behind: superb, a scheduler script and the service, each SIGKILLed while
it tunes, take every process they started with them (job workers, fork server, resource
tracker, MetaSchedule's build workers, RPC tracker and servers).

Each runs in a session of its own; its descendants are recorded from /proc as (pid,
start time), so neither a reused pid nor another test's processes can confuse the check.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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
            fixed: {{model: {model}, total_trials: 1000, batch_size: 64, population: 64,
                     genetic_iterations: 1, transfer_learning: false, seed: 0, remeasure: 0}}
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
    recorded: dict[int, tuple[int, str]] = {}
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
            f"{pid} {command}" for pid, (_, command) in sorted(left.items())
        )
    finally:  # a failure leaves nothing running either
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid, (start, _) in _still_there(recorded, process.pid).items():
            for kill in (os.killpg, os.kill):
                try:
                    if _stat(pid) and _stat(pid)[2] == start:
                        kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def _tuning(tree: dict[int, tuple[int, str]]) -> bool:
    """Whether a job's process (a multiprocessing worker) has started TVM workers (its
    builder's: the RPC tracker's and servers' have another parent)."""
    parents = {pid: stat[0] for pid in tree if (stat := _stat(pid))}
    return any(
        "tvm.exec.popen_worker" in command
        and "multiprocessing" in tree.get(parents.get(pid, 0), (0, ""))[1]
        for pid, (_, command) in tree.items()
    )


def _descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (start time, command line) of ``root``'s live descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(int(name))):
            children.setdefault(stat[0], []).append(int(name))
    tree, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if stat := _stat(pid):
            tree[pid] = (stat[2], _command(pid))
            todo.extend(children.get(pid, []))
    return tree


def _still_there(recorded: dict[int, tuple[int, str]], session: int) -> dict[int, tuple[int, str]]:
    """The recorded processes still running (not zombies, not their pid reused), and any
    other process of the killed process's session (started after the record)."""
    left = {}
    for name in os.listdir("/proc"):
        pid = int(name) if name.isdigit() else 0
        stat = _stat(pid) if pid else None
        if stat is None or stat[3] == "Z":
            continue
        if (pid in recorded and recorded[pid][0] == stat[2]) or (
            stat[1] == session and pid != session
        ):
            left[pid] = (stat[2], _command(pid))
    return left


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(parent pid, session id, start time, state) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[3]), int(fields[19]), fields[0]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"
