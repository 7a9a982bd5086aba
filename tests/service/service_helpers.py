"""The real service: ``simpletvm serve`` (service.cli) in a subprocess on a free port,
talked to with httpx; tiny models the tests make (nothing downloaded)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServiceProcess:
    """One ``serve`` process; ``start()`` waits until /api/v1/health answers."""

    def __init__(self, store: Path, *args: str) -> None:
        self.store, self.args = store, args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log = store / "serve.log"

    def start(self) -> ServiceProcess:
        self.store.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--store",
                    str(self.store),
                    *self.args,
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            assert self.process.poll() is None, f"the service died: {self.log.read_text()[-3000:]}"
            try:
                if httpx.get(self.url + "/api/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"the service did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
