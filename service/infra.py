"""The service's RPC tracker and servers, in a helper process that dies with the service.

The helper leads a process group of its own (the tracker's and servers' processes join
it), asks Linux to SIGTERM it when the service dies (PR_SET_PDEATHSIG), and also stops
when its stdin closes; :meth:`Devices.stop` kills the whole group, so a service killed
with SIGKILL leaves no tracker or server behind.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

START_TIMEOUT_S = 90.0


class Devices:
    """A tracker and ``servers`` servers per key, each server one device of its own
    (``key_per_server``): the scheduler's device resources are ``<key>.<n>``."""

    def __init__(self, keys: list[str], servers: int = 1, log: Path | None = None) -> None:
        self.keys, self.servers, self.log = keys, servers, log
        self.process: subprocess.Popen | None = None
        self.address: tuple[str, int] | None = None

    def start(self) -> Devices:
        log = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service.infra",
                    json.dumps({"keys": self.keys, "servers": self.servers}),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": _pythonpath()},
            )
        finally:
            if self.log:
                log.close()
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT_S)
        line = self.process.stdout.readline() if ready else b""
        if not line:
            self.stop()
            raise RuntimeError(
                f"the RPC tracker and servers did not start within "
                f"{START_TIMEOUT_S:.0f} s (see {self.log})"
            )
        message = json.loads(line)
        if "error" in message:
            self.stop()
            raise RuntimeError(f"cannot start the RPC tracker: {message['error']}")
        self.address = (message["host"], int(message["port"]))
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            self.process.stdin.close()
            self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # what it left running
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.wait()
        self.process = None


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH")
    return root + (os.pathsep + rest if rest else "")


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent ends (SIGTERM: the helper
    then stops its tracker and servers on the way out)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _helper(argv: list[str]) -> int:
    from simpletvm.remote.rpc import LocalRPC

    die_with_parent()
    config = json.loads(argv[0])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    infrastructure = LocalRPC(config["keys"], config["servers"], key_per_server=True)
    try:
        infrastructure.start()
    except Exception as error:  # noqa: BLE001 - reported to the service, which exits
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
        return 1
    try:
        host, port = infrastructure.address
        print(json.dumps({"host": host, "port": port}), flush=True)
        while sys.stdin.buffer.read(1024):  # EOF: the service closed it, or died
            pass
    finally:
        infrastructure.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_helper(sys.argv[1:]))
