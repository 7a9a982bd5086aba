"""superb tracker and superb server as real foreground processes, stopped by Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import time

from superb_helpers import REPO, superb_command, superb_env

from simpletvm.remote.rpc import free_servers, tracker_summary


def start(*args):
    return subprocess.Popen(
        superb_command(*args),
        cwd=REPO,
        env=superb_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def test_tracker_and_server_commands_serve_until_ctrl_c():
    tracker = start("tracker", "--host", "127.0.0.1", "--key", "superb-test-a")
    server = None
    try:
        line = tracker.stdout.readline()
        match = re.search(r"tracker listening on 127\.0\.0\.1:(\d+) with 1 server", line)
        assert match, line + tracker.stderr.read() if tracker.poll() is not None else line
        port = int(match.group(1))
        assert free_servers("127.0.0.1", port, "superb-test-a") == 1

        server = start(
            "server",
            "--tracker",
            f"127.0.0.1:{port}",
            "--key",
            "superb-test-b",
            "--count",
            "2",
            "--host",
            "127.0.0.1",
        )
        assert "2 server(s) of key 'superb-test-b' registered" in server.stdout.readline()
        assert free_servers("127.0.0.1", port, "superb-test-b") == 2

        assert stop(server) == 0
        deadline = time.monotonic() + 20
        while "superb-test-b" in _keys(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert free_servers("127.0.0.1", port, "superb-test-b") == 0
    finally:
        if server is not None:
            stop(server)
        assert stop(tracker) == 0


def _keys(port: int) -> dict:
    return {
        key: value
        for key, value in tracker_summary("127.0.0.1", port).get("queue_info", {}).items()
        if value.get("free")
    }


def test_server_without_a_tracker_is_exit_2():
    result = subprocess.run(
        superb_command("server", "--tracker", "127.0.0.1:1", "--key", "k"),
        cwd=REPO,
        env=superb_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "cannot reach the RPC tracker at 127.0.0.1:1" in result.stderr
