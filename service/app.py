"""The HTTP API (``/api/v1``, OpenAPI at ``/docs``) and the web page at ``/``."""

from __future__ import annotations

import asyncio
import io
import json
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service import require_extra

require_extra()  # a plain `pip install .` has no service extra: name it, not a missing module

from fastapi import Depends, FastAPI, File, Form, HTTPException, Request, Security, UploadFile  # noqa: E402
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse  # noqa: E402
from fastapi.security import HTTPBearer  # noqa: E402

from service.db import DONE, FINISHED, QUEUED  # noqa: E402
from service.runner import MODULE_FILE, Engine  # noqa: E402

MODEL_SUFFIXES = (".onnx", ".tflite", ".pb", ".keras", ".h5")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
LOCAL_USER = "local"
PAGE = Path(__file__).with_name("page.html")
USERS_REFRESH_S = 5.0  # how soon a user another process re-keyed loses the old token


@dataclass
class Settings:
    store: str
    host: str = "127.0.0.1"
    device_keys: tuple[str, ...] = ("local",)
    servers: int = 1
    tracker: tuple[str, int] | None = None
    backend: str = "processes"
    max_in_flight: int = 4
    max_upload_bytes: int = 100 * 1024 * 1024
    require_tokens: bool = False
    policy: str = "predictive"
    engine_options: dict[str, Any] = field(default_factory=dict)


def create_app(settings: Settings) -> FastAPI:
    engine = Engine(
        settings.store,
        settings.device_keys,
        settings.servers,
        settings.tracker,
        settings.backend,
        policy=settings.policy,
        max_in_flight=settings.max_in_flight,
        **settings.engine_options,
    )
    table = engine.table
    view = table.view  # what status requests read: no SQLite on the event loop
    require_tokens = settings.require_tokens or settings.host not in LOOPBACK
    if require_tokens and not table.has_users():
        raise SystemExit(
            f"serving on {settings.host} needs tokens: add a user first "
            "(simpletvm serve --add-user NAME)"
        )

    from contextlib import asynccontextmanager

    async def refresh_users() -> None:
        while True:
            await asyncio.sleep(USERS_REFRESH_S)
            await asyncio.to_thread(table.load_users)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await asyncio.to_thread(engine.start)
        refreshing = asyncio.create_task(refresh_users())
        try:
            yield
        finally:
            refreshing.cancel()
            await asyncio.to_thread(engine.stop)

    app = FastAPI(title="SimpleTVM tuning service", version="1", lifespan=lifespan)
    app.state.engine = engine

    app.add_middleware(RefuseLargeBodies, limit=settings.max_upload_bytes)

    users = Users(view, table, require_tokens)
    user = Security(users)

    async def own_job(job_id: str, who: str = user) -> dict[str, Any]:
        return owned_job(view, job_id, who)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    @app.get("/api/v1/health")
    def health() -> dict[str, Any]:
        return {
            "ok": engine.error is None,
            "error": engine.error,
            "devices": engine.device_keys,
            "tracker": engine.tracker,
        }

    @app.post("/api/v1/jobs", status_code=202)
    async def submit(
        file: UploadFile | None = File(default=None),
        model: str | None = Form(default=None),
        target: str = Form(default="cpu"),
        device_key: str | None = Form(default=None),
        minutes: float | None = Form(default=None),
        trials: int | None = Form(default=None),
        latency_ms: float | None = Form(default=None),
        known_only: bool = Form(default=False),
        who: str = user,
    ) -> dict[str, Any]:
        if (file is None) == (model is None):
            raise HTTPException(
                400,
                "send a model file (field 'file') or a built-in name "
                "(field 'model'), not both or neither",
            )
        key = device_key or settings.device_keys[0]
        if key not in settings.device_keys:
            raise HTTPException(
                400,
                f"unknown device key {key!r}: this service has {', '.join(settings.device_keys)}",
            )
        if minutes is not None and minutes <= 0 or trials is not None and trials < 1:
            raise HTTPException(400, "minutes must be > 0 and trials >= 1")
        if latency_ms is not None and latency_ms <= 0:
            raise HTTPException(400, "latency_ms must be > 0")
        job_id = uuid.uuid4().hex
        digest = None

        def request() -> dict[str, Any]:
            """The job's row as the client asked for it (name, path and digest once known)."""
            return {
                "id": job_id,
                "user": who,
                "model": name,
                "model_path": str(path),
                "model_sha256": digest,
                "target": target,
                "device_key": key,
                "minutes": minutes,
                "trials": trials,
                "latency_ms": latency_ms,
                "known_only": int(known_only),
            }

        if file is not None:
            name, path, digest = await _save_upload(
                file, engine.uploads, job_id, settings.max_upload_bytes
            )
            known = None
            if latency_ms:
                known = await asyncio.to_thread(table.known_module, digest, target, latency_ms)
            if known is not None and await asyncio.to_thread(
                _copy_module, engine, known["id"], job_id
            ):
                # the same model on the same target already has a module built from the
                # store's records that meets the target: the answer, with no trial
                await asyncio.to_thread(
                    table.add_job,
                    **request(),
                    state=DONE,
                    answered_from_store=1,
                    estimate_ms=known["estimate_ms"],
                    started=time.time(),
                    finished=time.time(),
                    progress=1.0,
                )
                await asyncio.to_thread(
                    table.update,
                    job_id,
                    ("known", {"from_job": known["id"], "estimate_ms": known["estimate_ms"]}),
                )
                return {"id": job_id, "state": DONE, "url": f"/api/v1/jobs/{job_id}"}
        else:
            from simpletvm.models.zoo import BUILTIN_MODELS, canonical_name

            name = path = canonical_name(model)
            if name is None:
                raise HTTPException(
                    400,
                    f"unknown built-in model {model!r}: choose one of "
                    f"{', '.join(sorted(BUILTIN_MODELS))}",
                )
        await asyncio.to_thread(table.add_job, **request())
        await asyncio.to_thread(engine.admit)
        return {"id": job_id, "state": QUEUED, "url": f"/api/v1/jobs/{job_id}"}

    @app.get("/api/v1/jobs/{job_id}/trace")
    def trace(job: dict = Depends(own_job)) -> list[dict[str, Any]]:
        return table.events(job["id"], kind="stage")

    @app.get("/api/v1/trace")
    def all_trace(who: str = user) -> list[dict[str, Any]]:
        return [
            {"job": j["id"], **e}
            for j in view.jobs(who)
            for e in table.events(j["id"], kind="stage")
        ]

    @app.get("/api/v1/jobs/{job_id}/events")
    async def events(
        request: Request, after: int = 0, job: dict = Depends(own_job)
    ) -> StreamingResponse:
        async def stream():
            last = after
            while True:
                for event in await asyncio.to_thread(table.events, job["id"], last):
                    last = event["id"]
                    yield f"id: {last}\nevent: {event['kind']}\ndata: {json.dumps(event)}\n\n"
                current = view.job(job["id"])
                if current["state"] in FINISHED and not await asyncio.to_thread(
                    table.events, job["id"], last
                ):
                    yield f"event: end\ndata: {json.dumps(_public(current))}\n\n"
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(0.5)

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.get("/api/v1/jobs/{job_id}/module")
    def module(job: dict = Depends(own_job)) -> Response:
        directory = engine.store.module_dir(job["id"])
        if job["state"] != DONE or not (directory / MODULE_FILE).exists():
            raise HTTPException(409, f"job {job['id']} has no module: it is {job['state']}")
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(directory.iterdir()):
                if path.is_file() and not path.name.startswith("."):
                    archive.write(path, path.name)
        return Response(
            buffer.getvalue(),
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{job["id"]}.zip"'},
        )

    @app.post("/api/v1/jobs/{job_id}/cancel", status_code=202)
    async def cancel(job: dict = Depends(own_job)) -> dict[str, Any]:
        if job["state"] in FINISHED:
            raise HTTPException(
                409, f"job {job['id']} is already {job['state']}: nothing to cancel"
            )
        await asyncio.to_thread(engine.cancel, job["id"])
        return {"id": job["id"], "cancelling": True}

    @app.exception_handler(HTTPException)
    async def problem(_: Request, exc: HTTPException) -> JSONResponse:
        return problem_response(exc)

    app.add_middleware(StatusAnswers, users=users, view=view)
    app.openapi = documented(app)
    return app


def owned_job(view, job_id: str, who: str) -> dict[str, Any]:
    """``who``'s job ``job_id`` from the status view; another user's job is 404 as a
    missing one, so ids of others' jobs cannot be probed."""
    job = view.job(job_id)
    if job is None or job["user"] != who:
        raise HTTPException(404, f"no job {job_id!r} of yours")
    return job


def problem_response(error: HTTPException) -> JSONResponse:
    """Every refusal's body: ``{"detail": ...}`` with its status."""
    return JSONResponse({"detail": error.detail}, status_code=error.status_code)


class StatusAnswers:
    """``GET /api/v1/jobs`` (my jobs) and ``GET /api/v1/jobs/{job_id}`` (one of them),
    answered from the status view before the request enters FastAPI: clients poll them by
    the hundred while jobs tune, and the framework's stack costs a request more than
    uvicorn does (BENCHMARKS.md). Same tokens, answers and errors as every other route;
    :func:`documented` describes the two in the OpenAPI schema."""

    PATH = "/api/v1/jobs"

    def __init__(self, app, users: Users, view) -> None:
        self.app, self.users, self.view = app, users, view

    async def __call__(self, scope, receive, send) -> None:
        job_id = self._asked(scope)
        if job_id is None:
            await self.app(scope, receive, send)
            return
        authorization = dict(scope["headers"]).get(b"authorization")
        try:
            who = await self.users.name_for(authorization and authorization.decode("latin-1"))
            if job_id == "":
                response = JSONResponse([_public(job) for job in self.view.jobs(who)])
            else:
                response = JSONResponse(_public(owned_job(self.view, job_id, who)))
        except HTTPException as error:
            response = problem_response(error)
        await response(scope, receive, send)

    def _asked(self, scope) -> str | None:
        """ "" for the list, the job id for one job, None for any other request."""
        if scope["type"] != "http" or scope["method"] != "GET":
            return None
        path = scope["path"]
        if path == self.PATH:
            return ""
        head, _, job_id = path.rpartition("/")
        return job_id if head == self.PATH and job_id else None


def documented(app: FastAPI):
    """``app.openapi`` with the two routes :class:`StatusAnswers` serves described."""
    from fastapi.openapi.utils import get_openapi

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            bearer = [{"bearer": []}]
            document["paths"].setdefault(StatusAnswers.PATH, {})["get"] = {
                "summary": "My jobs",
                "description": "Your jobs, oldest first: state, stage, trials, estimate, ETA.",
                "security": bearer,
                "responses": {"200": {"description": "a list of jobs"}, "401": _BAD_TOKEN},
            }
            document["paths"][StatusAnswers.PATH + "/{job_id}"] = {
                "get": {
                    "summary": "One of my jobs",
                    "description": "State, stage, trials, best estimate (ms) and ETA (s).",
                    "security": bearer,
                    "parameters": [
                        {
                            "name": "job_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": {
                        "200": {"description": "the job"},
                        "401": _BAD_TOKEN,
                        "404": {"description": "no such job of yours"},
                    },
                }
            }
            app.openapi_schema = document
        return app.openapi_schema

    return schema


_BAD_TOKEN = {"description": "a missing or unknown token"}


class Users(HTTPBearer):
    """The user a request's bearer token names (OpenAPI documents the scheme): one
    dependency that reads the header itself, as status requests are answered by the
    hundred. Without a token, the loopback's local user, unless tokens are required."""

    def __init__(self, view, table, require_tokens: bool) -> None:
        super().__init__(
            scheme_name="bearer", auto_error=False, description="a user's token (serve --add-user)"
        )
        self.view, self.table, self.require_tokens = view, table, require_tokens

    async def __call__(self, request: Request) -> str:  # type: ignore[override]
        return await self.name_for(request.headers.get("authorization"))

    async def name_for(self, authorization: str | None) -> str:
        if authorization is None:
            if self.require_tokens:
                raise HTTPException(401, "missing token: send 'Authorization: Bearer TOKEN'")
            return LOCAL_USER
        scheme, _, token = authorization.partition(" ")
        name = None
        if scheme.lower() == "bearer" and token.strip():
            name = self.view.user_of(token.strip())
            if name is None:  # perhaps a user added since by another process
                await asyncio.to_thread(self.table.load_users)
                name = self.view.user_of(token.strip())
        if name is None:
            raise HTTPException(401, "unknown token (expected 'Authorization: Bearer TOKEN')")
        return name


class RefuseLargeBodies:
    """Refuse an upload whose declared size is over the limit before the form parser
    spools it to disk (the handler also counts what it reads). Plain ASGI: the
    ``@app.middleware`` kind would cost every request, status ones included, a task
    group and a stream of its own."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            declared = dict(scope["headers"]).get(b"content-length", b"")
            if declared.isdigit() and int(declared) > self.limit + (1 << 16):
                response = JSONResponse(
                    {"detail": f"upload too large: over the limit of {self.limit} bytes"},
                    status_code=413,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _public(job: dict[str, Any]) -> dict[str, Any]:
    """A job as the API shows it, with its ETA (seconds) when one can be told."""
    shown = {k: v for k, v in job.items() if k != "model_path"}
    shown["answered_from_store"] = bool(job["answered_from_store"])
    shown["known_only"] = bool(job["known_only"])
    eta = None
    if job["state"] == "running" and job["started"]:
        elapsed = time.time() - job["started"]
        if job["minutes"]:
            eta = max(0.0, job["minutes"] * 60 - elapsed)
        elif job["progress"]:
            eta = elapsed * (1 - job["progress"]) / max(job["progress"], 1e-3)
    shown["eta_s"] = eta
    return shown


def _copy_module(engine: Engine, source_id: str, job_id: str) -> bool:
    """Give ``job_id`` a copy of ``source_id``'s saved module; False if it has none."""
    import shutil

    source = engine.store.module_dir(source_id)
    if not (source / MODULE_FILE).exists():
        return False
    target = engine.store.module_dir(job_id)
    shutil.copytree(source, target.with_name(f".{job_id}.tmp"), dirs_exist_ok=True)
    target.with_name(f".{job_id}.tmp").rename(target)
    return True


async def _save_upload(
    upload: UploadFile, directory: Path, job_id: str, limit: int
) -> tuple[str, Path, str]:
    """Check the upload's name and size; store it under a generated name; its sha256."""
    import hashlib

    name = upload.filename or ""
    if not name or "/" in name or "\\" in name or ".." in name or "\x00" in name:
        raise HTTPException(400, f"bad file name {name!r}: send a plain file name, no path")
    suffix = Path(name).suffix.lower()
    if suffix not in MODEL_SUFFIXES:
        raise HTTPException(
            400, f"{name!r} is not a model file: expected one of {', '.join(MODEL_SUFFIXES)}"
        )
    path = directory / f"{job_id}{suffix}"
    size, digest = 0, hashlib.sha256()
    with open(path, "wb") as handle:
        while chunk := await upload.read(1 << 20):
            size += len(chunk)
            if size > limit:
                handle.close()
                path.unlink(missing_ok=True)
                raise HTTPException(413, f"upload too large: over the limit of {limit} bytes")
            handle.write(chunk)
            digest.update(chunk)
    if size == 0:
        path.unlink(missing_ok=True)
        raise HTTPException(400, f"{name!r} is an empty file")
    return name, path, digest.hexdigest()
