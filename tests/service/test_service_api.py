"""The API's rules on bad input and ownership: each a 4xx naming the problem, and the
service keeps running (no tuning here: the jobs that reach a worker fail at import)."""

from __future__ import annotations

import httpx
import pytest
from service_helpers import ServiceProcess

from service.db import JobTable
from simpletvm.client import Client, ServiceError


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = tmp_path_factory.mktemp("service-api") / "store"
    table = JobTable(store / "service" / "service.sqlite")
    tokens = {name: table.add_user(name) for name in ("alice", "bob")}
    service = ServiceProcess(store, "--require-tokens", "--max-upload-mb", "0.01").start()
    yield service, tokens
    service.stop()


def post(server, token, files=None, data=None) -> httpx.Response:
    service, tokens = server
    headers = (
        {"Authorization": f"Bearer {tokens[token]}"}
        if token in tokens
        else ({"Authorization": f"Bearer {token}"} if token else {})
    )
    return httpx.post(
        service.url + "/api/v1/jobs",
        headers=headers,
        files=files,
        data=data or {"trials": "1"},
        timeout=30,
    )


def assert_problem(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    for word in words:
        assert word in detail, detail


def test_a_missing_or_wrong_token_is_401(server) -> None:
    assert_problem(post(server, None, data={"model": "resnet18"}), 401, "missing token")
    assert_problem(post(server, "not-a-token", data={"model": "resnet18"}), 401, "unknown token")
    assert_problem(httpx.get(server[0].url + "/api/v1/jobs"), 401, "missing token")


def test_status_routes_refuse_bad_tokens_and_are_documented(server) -> None:
    """The two status routes are answered before FastAPI (service.app.StatusAnswers):
    they keep its errors, and OpenAPI still describes them with the bearer scheme."""
    service, tokens = server
    url = service.url + "/api/v1/jobs"
    assert_problem(httpx.get(url, headers={"Authorization": "Basic x"}), 401, "unknown token")
    assert_problem(httpx.get(url + "/abc", headers={"Authorization": "Bearer no"}), 401)
    alice = {"Authorization": f"Bearer {tokens['alice']}"}
    assert_problem(httpx.get(url + "/nonexistent", headers=alice), 404, "nonexistent")
    assert httpx.get(url + "/nonexistent/trace", headers=alice).status_code == 404
    schema = httpx.get(service.url + "/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["bearer"]["description"],
    }
    for path in ("/api/v1/jobs", "/api/v1/jobs/{job_id}"):
        assert schema["paths"][path]["get"]["security"] == [{"bearer": []}], path
    assert "post" in schema["paths"]["/api/v1/jobs"]  # submitting stays FastAPI's route


def test_a_file_that_is_not_a_model_is_refused(server) -> None:
    assert_problem(
        post(server, "alice", files={"file": ("notes.txt", b"hello")}),
        400,
        "notes.txt",
        "not a model file",
        ".onnx",
    )


def test_an_empty_file_is_refused(server) -> None:
    assert_problem(
        post(server, "alice", files={"file": ("empty.onnx", b"")}), 400, "empty.onnx", "empty file"
    )


def test_an_oversized_upload_is_refused(server) -> None:
    assert_problem(
        post(server, "alice", files={"file": ("big.onnx", b"x" * 20000)}), 413, "too large", "limit"
    )
    assert not list((server[0].store / "service" / "uploads").glob("*"))  # nothing kept


@pytest.mark.parametrize(
    "name", ["../evil.onnx", "../../etc/passwd.onnx", "a/b.onnx", "..\\x.onnx"]
)
def test_a_file_name_with_a_path_is_refused(server, name) -> None:
    response = post(server, "alice", files={"file": (name, b"onnx?")})
    assert_problem(response, 400, "bad file name", "no path")


def test_an_unknown_built_in_name_is_refused_with_the_choices(server) -> None:
    assert_problem(
        post(server, "alice", data={"model": "resnet999"}),
        400,
        "unknown built-in model 'resnet999'",
        "resnet18",
    )


def test_an_unknown_device_key_and_a_bad_budget_are_refused(server) -> None:
    assert_problem(
        post(server, "alice", data={"model": "resnet18", "device_key": "tpu"}),
        400,
        "unknown device key 'tpu'",
    )
    assert_problem(post(server, "alice", data={"model": "resnet18", "trials": "0"}), 400, "trials")


def test_another_users_job_is_404_and_a_finished_job_cannot_be_cancelled(server) -> None:
    service, tokens = server
    with Client(service.url, tokens["bob"]) as bob, Client(service.url, tokens["alice"]) as alice:
        # a file that claims to be ONNX: the importer fails in the job's worker, which
        # fails that job only, with the importer's message
        job_id = _submit_bytes(service.url, tokens["bob"])
        for call in (alice.job, alice.trace, alice.cancel):
            with pytest.raises(ServiceError) as refused:
                call(job_id)
            assert refused.value.status == 404 and job_id in refused.value.detail
        assert all(job["id"] != job_id for job in alice.jobs())
        finished = bob.wait(job_id, timeout=300)
        assert finished["state"] == "failed" and finished["error"], finished
        with pytest.raises(ServiceError) as refused:
            bob.cancel(job_id)
        assert refused.value.status == 409 and "already failed" in refused.value.detail
        with pytest.raises(ServiceError) as refused:
            bob.fetch(job_id, service.store / "out")
        assert refused.value.status == 409 and "no module" in refused.value.detail
        health = httpx.get(service.url + "/api/v1/health").json()
        assert health["ok"], health  # the service keeps running


def _submit_bytes(url: str, token: str) -> str:
    response = httpx.post(
        url + "/api/v1/jobs",
        headers={"Authorization": f"Bearer {token}"},
        files={"file": ("broken.onnx", b"this is not onnx")},
        data={"trials": "1"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_200_status_requests_at_once_are_each_answered_right(server) -> None:
    """Each user's jobs and list, another user's job (404) and a bad token (401), all at
    once while the jobs move (their workers fail at import): every answer right. How fast
    they come is bench/service_load.py's question (timed tests are flaky)."""
    import asyncio

    service, tokens = server
    users = ("alice", "bob")
    mine = {name: [_submit_bytes(service.url, tokens[name]) for _ in range(2)] for name in users}
    listed = {}
    for name in users:
        with Client(service.url, tokens[name]) as client:
            listed[name] = {job["id"] for job in client.jobs()}
    states = ("queued", "running", "done", "failed", "cancelled")

    async def one(http: httpx.AsyncClient, i: int) -> tuple[int, int, bool]:
        name, other = users[i % 2], users[1 - i % 2]
        auth = {"Authorization": f"Bearer {tokens[name]}"}
        kind = i // 2 % 5
        if kind == 0:
            response = await http.get("/api/v1/jobs", headers=auth)
            rows = response.json()
            right = response.status_code == 200 and {j["id"] for j in rows} == listed[name]
            return i, response.status_code, right and all(j["user"] == name for j in rows)
        if kind in (1, 2):
            job_id = mine[name][kind - 1]
            response = await http.get(f"/api/v1/jobs/{job_id}", headers=auth)
            row = response.json()
            right = response.status_code == 200 and (row["id"], row["user"]) == (job_id, name)
            return i, response.status_code, right and row["state"] in states
        if kind == 3:
            response = await http.get(f"/api/v1/jobs/{mine[other][0]}", headers=auth)
            return i, response.status_code, response.status_code == 404
        response = await http.get("/api/v1/jobs", headers={"Authorization": "Bearer nope"})
        return i, response.status_code, response.status_code == 401

    async def burst() -> list[tuple[int, int, bool]]:
        async with httpx.AsyncClient(
            base_url=service.url, timeout=60, limits=httpx.Limits(max_connections=200)
        ) as http:
            return await asyncio.gather(*(one(http, i) for i in range(200)))

    answers = asyncio.run(burst())
    assert len(answers) == 200 and [a for a in answers if not a[2]] == []
    # each answer is the stored row: a finished job reads as the table has it
    table = JobTable(service.store / "service" / "service.sqlite")
    with Client(service.url, tokens["alice"]) as alice:
        for job_id in mine["alice"]:
            shown = alice.wait(job_id, timeout=300, poll_s=0.1)
            stored = table.job(job_id)
            assert (shown["state"], shown["error"]) == (stored["state"], stored["error"])


def test_a_user_added_while_the_service_runs_gets_in_and_a_replaced_token_not(server) -> None:
    service, _ = server

    def jobs(token: str) -> list:
        with Client(service.url, token) as client:
            return client.jobs()

    table = JobTable(service.store / "service" / "service.sqlite")  # as `serve --add-user`
    first = table.add_user("carol")
    assert jobs(first) == []
    second = table.add_user("carol")  # re-keyed
    assert jobs(second) == []
    with pytest.raises(ServiceError) as refused:
        jobs(first)
    assert refused.value.status == 401


def test_non_loopback_without_users_refuses_to_start(tmp_path) -> None:
    import subprocess
    import sys

    from service_helpers import ROOT, free_port

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
            "--store",
            str(tmp_path / "store"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "needs tokens" in result.stdout + result.stderr


def test_an_upload_declared_far_over_the_limit_is_refused_before_it_is_read(server) -> None:
    assert_problem(
        post(server, "alice", files={"file": ("huge.onnx", b"x" * 200_000)}), 413, "too large"
    )


def test_the_simpletvm_commands_reach_the_service(server, tmp_path) -> None:
    import subprocess
    import sys

    from service_helpers import ROOT

    service, tokens = server
    (tmp_path / "notes.txt").write_text("hello")

    def simpletvm(*args: str, token: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "simpletvm", *args, "--server", service.url, "--token", token],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    refused = simpletvm("submit", str(tmp_path / "notes.txt"), token=tokens["alice"])
    assert refused.returncode == 2 and "not a model file" in refused.stderr, refused
    wrong = simpletvm("jobs", token="nope")
    assert wrong.returncode == 2 and "unknown token" in wrong.stderr, wrong
    listed = simpletvm("jobs", token=tokens["alice"])
    assert listed.returncode == 0 and listed.stdout.split()[:2] == ["id", "model"], listed
