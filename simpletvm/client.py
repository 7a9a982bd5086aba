"""A Python client for the tuning service (``simpletvm serve``), over httpx.

It talks HTTP only, so it lives in simpletvm, where users look for it, and needs only
httpx of the service extra; nothing in simpletvm imports it."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simpletvm.errors import SimpleTVMError
from simpletvm.extras import require

require("service", ("httpx",), "simpletvm.client")  # a plain `pip install .` has no httpx

import httpx  # noqa: E402

FINISHED = ("done", "failed", "cancelled")


class ServiceError(SimpleTVMError):
    """The service refused a request: ``status`` and its ``detail``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status, self.detail = status, detail

    def __reduce__(self):
        return type(self), (self.status, self.detail)


class Client:
    """``Client("http://127.0.0.1:8000", token=...)``: submit, watch, fetch, cancel."""

    def __init__(self, server: str, token: str | None = None, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text
            raise ServiceError(response.status_code, str(detail))
        return response

    def submit(
        self,
        model: str | Path,
        *,
        target: str = "cpu",
        device_key: str | None = None,
        minutes: float | None = None,
        trials: int | None = None,
        latency_ms: float | None = None,
        known_only: bool = False,
    ) -> str:
        """Submit a model file or a built-in name; returns the job id (its run id)."""
        data: dict[str, Any] = {"target": target, "known_only": str(known_only).lower()}
        for name, value in (
            ("device_key", device_key),
            ("minutes", minutes),
            ("trials", trials),
            ("latency_ms", latency_ms),
        ):
            if value is not None:
                data[name] = str(value)
        path = Path(model)
        if path.is_file():
            with open(path, "rb") as handle:
                response = self.http.post(
                    "/api/v1/jobs", data=data, files={"file": (path.name, handle)}
                )
        else:
            response = self.http.post("/api/v1/jobs", data={**data, "model": str(model)})
        return self._check(response).json()["id"]

    def jobs(self) -> list[dict[str, Any]]:
        return self._check(self.http.get("/api/v1/jobs")).json()

    def job(self, job_id: str) -> dict[str, Any]:
        return self._check(self.http.get(f"/api/v1/jobs/{job_id}")).json()

    def trace(self, job_id: str) -> list[dict[str, Any]]:
        return self._check(self.http.get(f"/api/v1/jobs/{job_id}/trace")).json()

    def cancel(self, job_id: str) -> None:
        self._check(self.http.post(f"/api/v1/jobs/{job_id}/cancel"))

    def events(self, job_id: str) -> Iterator[dict[str, Any]]:
        """The job's events as the server sends them, until it ends."""
        with self.http.stream("GET", f"/api/v1/jobs/{job_id}/events", timeout=None) as response:
            self._check(response) if response.status_code >= 400 else None
            kind = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    yield {"event": kind, **json.loads(line[6:])}

    def wait(self, job_id: str, timeout: float | None = None, poll_s: float = 0.5) -> dict:
        deadline = None if timeout is None else time.time() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in FINISHED:
                return job
            if deadline is not None and time.time() > deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']} after {timeout} s")
            time.sleep(poll_s)

    def fetch(self, job_id: str, directory: str | Path) -> Path:
        """Download a done job's module directory (model.so, metadata.json) into ``directory``."""
        response = self._check(self.http.get(f"/api/v1/jobs/{job_id}/module"))
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
            for name in archive.namelist():
                if Path(name).name != name:  # only plain names, as the service writes them
                    continue
                (target / name).write_bytes(archive.read(name))
        return target
