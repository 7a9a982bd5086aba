"""A tracker and servers of this machine in a helper process that dies with its owner.

superb's sweeps and the tuning service both profile through RPC servers they start
themselves. The helper (``python -m simpletvm.remote.local_devices``) leads a process
group of its own (the tracker's and servers' processes join it), exits when its owner's
process is gone (:func:`simpletvm._process.orphans.exit_with_parent`; the tracker and
servers then follow it) and stops when its stdin closes; :meth:`stop` then kills the
group, so an owner killed with SIGKILL leaves no tracker or server behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from simpletvm.errors import SimpleTVMError

START_TIMEOUT_S = 90.0


class LocalDevices:
    """A tracker and ``servers`` servers per key. With ``key_per_server`` each server
    registers under a key of its own, ``<key>.<n>`` (a scheduler's device resources)."""

    def __init__(
        self,
        keys: list[str],
        servers: int = 1,
        log: Path | None = None,
        key_per_server: bool = False,
    ) -> None:
        self.keys, self.servers, self.log = keys, servers, log
        self.key_per_server = key_per_server
        self.process: subprocess.Popen | None = None
        self.address: tuple[str, int] | None = None

    def start(self) -> LocalDevices:
        config = {
            "keys": self.keys,
            "servers": self.servers,
            "key_per_server": self.key_per_server,
            "owner": os.getpid(),
        }
        log = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "simpletvm.remote.local_devices", json.dumps(config)],
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
            raise SimpleTVMError(
                f"the local RPC tracker and servers did not start within "
                f"{START_TIMEOUT_S:.0f} s (see {self.log})"
            )
        message = json.loads(line)
        if "error" in message:
            self.stop()
            raise SimpleTVMError(f"cannot start the local RPC tracker: {message['error']}")
        self.address = (message["host"], int(message["port"]))
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            self.process.stdin.close()  # the helper's signal to stop
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

    def __enter__(self) -> LocalDevices:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _pythonpath() -> str:
    """This simpletvm's directory first, so the helper imports the same code."""
    root = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return root + (os.pathsep + rest if rest else "")


def _helper(argv: list[str]) -> int:
    """Run the tracker and servers until stdin closes (or SIGTERM)."""
    from simpletvm._process.orphans import exit_with_parent
    from simpletvm.remote.rpc import LocalRPC

    config = json.loads(argv[0])
    exit_with_parent(parent=config["owner"])  # the owner's process, not a thread of it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner decides when this stops
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # ... or stop cleanly
    devices = LocalRPC(config["keys"], config["servers"], key_per_server=config["key_per_server"])
    try:
        devices.start()
    except Exception as error:  # noqa: BLE001 - reported to the owner, which exits
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
        return 1
    try:
        host, port = devices.address
        print(json.dumps({"host": host, "port": port}), flush=True)
        while sys.stdin.buffer.read(1024):  # EOF: the owner closed it, or died
            pass
    finally:
        devices.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_helper(sys.argv[1:]))
