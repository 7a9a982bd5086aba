"""The RPC tracker and servers a sweep profiles through.

For a sweep, superb starts them in a helper process (``python -m superb.infra``) that
stops them when superb closes its stdin, which also happens when superb is killed, so a
SIGKILLed sweep leaves no tracker behind. ``superb tracker`` and ``superb server`` run
the same :class:`simpletvm.remote.rpc.LocalRPC` in the foreground for a multi-machine setup.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from simpletvm.errors import SimpleTVMError
from simpletvm.remote.rpc import LocalRPC

START_TIMEOUT_S = 60.0


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); ValueError with the expected form otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def serve_until_signalled(infrastructure: LocalRPC, announce) -> None:
    """Start, announce the tracker's address, and run until SIGINT or SIGTERM."""
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        with infrastructure:
            announce(infrastructure.address)
            while not stop.wait(0.5):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class LocalInfrastructure:
    """A sweep's own tracker and servers, in a helper process that dies with superb."""

    def __init__(self, keys: list[str], servers: int = 1, log: Path | None = None):
        self.keys, self.servers, self.log = keys, servers, log
        self.process: subprocess.Popen | None = None
        self.address: tuple[str, int] | None = None

    def start(self) -> LocalInfrastructure:
        log = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "superb.infra",
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
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> LocalInfrastructure:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _pythonpath() -> str:
    """superb's own directory first, so the helper imports this superb."""
    root = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH")
    return root + (os.pathsep + rest if rest else "")


def _helper(argv: list[str]) -> int:
    """``python -m superb.infra '{"keys": [...], "servers": 1}'``: run until stdin closes."""
    config = json.loads(argv[0])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # superb decides when this stops
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # ... or stop cleanly
    infrastructure = LocalRPC(config["keys"], config["servers"])
    try:
        infrastructure.start()
    except Exception as error:  # noqa: BLE001 - reported to superb, which exits
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
        return 1
    try:
        host, port = infrastructure.address
        print(json.dumps({"host": host, "port": port}), flush=True)
        while sys.stdin.buffer.read(1024):  # EOF: superb closed it, or superb died
            pass
    finally:
        infrastructure.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_helper(sys.argv[1:]))
