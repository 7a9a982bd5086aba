"""A tuning service to put load on: started as a process on a free port of this machine,
and asked for its jobs' status in bursts, as many pollers would."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]  # the repository: ``python -m service.cli`` runs here


def free_port() -> int:
    """A TCP port free on the loopback interface."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(store: Path, port: int, in_flight: int, policy: str) -> subprocess.Popen:
    """The service serving ``store`` on ``port``, once it answers its health check; its
    output goes to ``store/serve.log``."""
    log = open(store / "serve.log", "ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--port",
            str(port),
            "--store",
            str(store),
            "--max-in-flight",
            str(in_flight),
            "--policy",
            policy,
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the service died: see {store / 'serve.log'}")
        try:
            if httpx.get(url + "/api/v1/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.3)


def ms(seconds: float) -> float:
    """Seconds as milliseconds, to a tenth."""
    return round(seconds * 1e3, 1)


def percentile(values: list[float], fraction: float) -> float:
    """The median for 0.5 (as statistics.median), else the value at ``fraction`` of the
    sorted list."""
    if fraction == 0.5:
        return statistics.median(values)
    return sorted(values)[int(fraction * (len(values) - 1))]


async def status_burst_as(
    url: str,
    token: str,
    job_ids: list[str],
    count: int,
    spacing_s: float = 0.0,
    fresh_connections: bool = False,
):
    """``count`` status requests, all at once (``spacing_s`` 0) or one every
    ``spacing_s`` (``count`` pollers asking once per ``count * spacing_s`` seconds):
    every fourth lists the user's jobs, the others ask for one of ``job_ids``.

    Each request has a connection of its own, opened before the clock starts, as a
    poller's kept-alive connection is (the client, the CLI's progress bar and the page
    keep theirs); with ``fresh_connections`` each request connects inside its time."""
    host, _, port = url.removeprefix("http://").partition(":")
    kept = [] if fresh_connections else await _connect(host, int(port), count)

    async def one(i: int) -> tuple[float, bool]:
        job_id = job_ids[i % len(job_ids)]
        await asyncio.sleep(i * spacing_s)
        t = time.perf_counter()
        connection = kept[i] if kept else await asyncio.open_connection(host, int(port))
        path = "/api/v1/jobs" if i % 4 == 3 else f"/api/v1/jobs/{job_id}"
        try:
            status, body = await _get(connection, host, int(port), path, token)
        finally:
            if not kept:
                connection[1].close()
        elapsed = time.perf_counter() - t
        if i % 4 == 3:
            listed = {job["id"] for job in body} if status == 200 else set()
            return elapsed, set(job_ids) <= listed
        return elapsed, status == 200 and body["id"] == job_id

    try:
        results = await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        for _, writer in kept:
            writer.close()
    return [r[0] for r in results], sum(1 for r in results if not r[1])


async def _connect(host: str, port: int, count: int) -> list:
    connections = []
    for _ in range(count):  # one by one: 200 connects at once overflow a small backlog
        connections.append(await asyncio.open_connection(host, port))
    return connections


async def _get(connection, host: str, port: int, path: str, token: str) -> tuple[int, object]:
    """One GET in plain asyncio. httpx's client spends more CPU per request at 200 at
    once than the service does (its pool), so a burst sent through it times the client."""
    reader, writer = connection
    auth = f"Authorization: Bearer {token}\r\n" if token else ""  # none on loopback
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}\r\n".encode())
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in head[1:] if ": " in line)
    body = await reader.readexactly(int(fields.get("content-length", 0)))
    return int(head[0].split()[1]), json.loads(body) if body else None
