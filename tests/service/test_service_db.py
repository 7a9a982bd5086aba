"""The service's view of users and jobs in memory (service.db.StatusView): what status
requests read instead of SQLite, current after every write the table makes."""

from __future__ import annotations

import threading

from service.db import DONE, QUEUED, RUNNING, JobTable


def job(job_id: str, user: str, created: float) -> dict:
    return dict(
        id=job_id,
        user=user,
        model="tiny.onnx",
        model_path="/x/tiny.onnx",
        target="cpu",
        device_key="local",
        created=created,
    )


def test_the_view_shows_each_write_as_soon_as_it_returns(tmp_path) -> None:
    table = JobTable(tmp_path / "service.sqlite", view=True)
    table.add_job(**job("b", "alice", 2.0))
    table.add_job(**job("a", "alice", 2.0))
    table.add_job(**job("c", "bob", 1.0))
    assert table.view.job("a") == table.job("a")  # the columns' defaults included
    assert table.view.job("a")["state"] == QUEUED and table.view.job("a")["trials_done"] == 0
    table.update("a", ("admitted", {}), state=RUNNING, attempts=1)
    assert table.view.job("a")["state"] == RUNNING and table.view.job("a")["attempts"] == 1
    table.update("a", ("stage", {"stage": "select"}))  # an event alone changes no row
    assert table.view.job("a") == table.job("a")
    assert [j["id"] for j in table.view.jobs("alice")] == [j["id"] for j in table.jobs("alice")]
    assert table.view.jobs("alice") == table.jobs("alice") and table.view.jobs("carol") == []
    assert table.view.job("nope") is None
    # a table opened later (the service started again) starts from what is stored
    again = JobTable(tmp_path / "service.sqlite", view=True)
    assert again.view.jobs("alice") == table.jobs("alice")


def test_writes_from_many_threads_leave_the_view_equal_to_the_table(tmp_path) -> None:
    table = JobTable(tmp_path / "service.sqlite", view=True)
    table.add_job(**job("a", "alice", 1.0))

    def write(worker: int) -> None:
        for n in range(40):
            table.update("a", trials_done=worker * 100 + n, progress=n / 40)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    table.update("a", state=DONE)
    assert table.view.job("a") == table.job("a") and table.view.job("a")["state"] == DONE


def test_users_another_process_adds_or_rekeys_show_after_load_users(tmp_path) -> None:
    table = JobTable(tmp_path / "service.sqlite", view=True)
    own = table.add_user("alice")
    assert table.view.user_of(own) == "alice" and table.view.user_of("wrong") is None
    other = JobTable(tmp_path / "service.sqlite")  # `serve --add-user` while it runs
    token = other.add_user("bob")
    assert table.view.user_of(token) is None
    table.load_users()
    assert table.view.user_of(token) == "bob"
    rekeyed = other.add_user("bob")
    table.load_users()
    assert table.view.user_of(rekeyed) == "bob" and table.view.user_of(token) is None
