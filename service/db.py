"""The service's tables in SQLite (WAL): users with hashed tokens, jobs with their state,
and each job's events (stages, trials, state changes) for progress, SSE and the trace;
and the service's view of users and jobs in memory, which status requests read."""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
FINISHED = (DONE, FAILED, CANCELLED)

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, token_sha256 TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, user TEXT NOT NULL, model TEXT NOT NULL, model_path TEXT NOT NULL,
    model_sha256 TEXT,
    target TEXT NOT NULL, device_key TEXT NOT NULL, minutes REAL, trials INTEGER,
    latency_ms REAL, known_only INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL, stage TEXT, trials_done INTEGER NOT NULL DEFAULT 0,
    estimate_ms REAL, progress REAL, answered_from_store INTEGER NOT NULL DEFAULT 0,
    error TEXT, created REAL NOT NULL, started REAL, finished REAL, attempts INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, time REAL NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, id);
"""

JOB_FIELDS = (
    "id",
    "user",
    "model",
    "target",
    "device_key",
    "minutes",
    "trials",
    "latency_ms",
    "known_only",
    "state",
    "stage",
    "trials_done",
    "estimate_ms",
    "progress",
    "answered_from_store",
    "error",
    "created",
    "started",
    "finished",
    "attempts",
)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class StatusView:
    """Users (token hash -> name) and job rows in memory, so that a status request does no
    SQLite and no blocking work on the service's event loop, however many arrive at once.

    The :class:`JobTable` that owns it puts each job row it writes here after the write
    commits (the service's process is the only writer of jobs). Rows are replaced, never
    changed in place, so a reader holds a consistent row. Users come from the table when
    it starts and after each change it makes; :meth:`JobTable.load_users` reads again
    those another process added (``serve --add-user`` while the service runs)."""

    def __init__(self) -> None:
        self._users: dict[str, str] = {}
        self._jobs: dict[str, dict[str, Any]] = {}
        self._by_user: dict[str, dict[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def user_of(self, token: str) -> str | None:
        return self._users.get(token_hash(token))

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self._jobs.get(job_id)

    def jobs(self, user: str) -> list[dict[str, Any]]:
        """``user``'s jobs in the order of :meth:`JobTable.jobs`."""
        with self._lock:
            rows = list(self._by_user.get(user, {}).values())
        return sorted(rows, key=lambda row: (row["created"], row["id"]))

    def _put(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._jobs[row["id"]] = row
            self._by_user.setdefault(row["user"], {})[row["id"]] = row

    def _set_users(self, users: dict[str, str]) -> None:
        self._users = users  # one assignment: a reader sees the old map or the new one


class JobTable:
    """One connection per thread to ``<store>/service/service.sqlite``; with ``view``, a
    :class:`StatusView` (``self.view``) kept current by this table's writes."""

    def __init__(self, path: str | Path, view: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._db().executescript(SCHEMA)
        # the view takes rows in the order their writes commit
        self._writing = threading.Lock()
        self.view = StatusView() if view else None
        if self.view is not None:
            self.load_users()
            for row in self.jobs():
                self.view._put(row)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, kind, *_) -> None:
            self.db.execute("COMMIT" if kind is None else "ROLLBACK")

    def _tx(self) -> JobTable._Tx:
        return JobTable._Tx(self._db())

    # ---- users ----------------------------------------------------------------------
    def add_user(self, name: str, token: str | None = None) -> str:
        """Create or re-key ``name``; returns its token (only its hash is stored)."""
        token = token or secrets.token_urlsafe(24)
        with self._tx() as db:
            db.execute(
                "INSERT INTO users (name, token_sha256) VALUES (?, ?) ON CONFLICT(name) "
                "DO UPDATE SET token_sha256 = excluded.token_sha256",
                (name, token_hash(token)),
            )
        if self.view is not None:
            self.load_users()
        return token

    def load_users(self) -> None:
        """Read the users into the view again: those another process added, and the new
        token of one it re-keyed (the old one stops working)."""
        rows = self._db().execute("SELECT token_sha256, name FROM users").fetchall()
        self.view._set_users({digest: name for digest, name in rows})

    def user_of(self, token: str) -> str | None:
        row = (
            self._db()
            .execute("SELECT name FROM users WHERE token_sha256 = ?", (token_hash(token),))
            .fetchone()
        )
        return row[0] if row else None

    def has_users(self) -> bool:
        return self._db().execute("SELECT 1 FROM users LIMIT 1").fetchone() is not None

    # ---- jobs -----------------------------------------------------------------------
    def add_job(self, **fields: Any) -> None:
        fields.setdefault("state", QUEUED)
        fields.setdefault("created", time.time())
        names = ", ".join(fields)
        with self._writing:
            with self._tx() as db:
                db.execute(
                    f"INSERT INTO jobs ({names}) VALUES ({', '.join('?' * len(fields))})",
                    tuple(fields.values()),
                )
                _event(db, fields["id"], "state", {"state": fields["state"]})
                row = self._written(db, fields["id"])
            self._show(row)

    def update(self, job_id: str, event: tuple[str, dict] | None = None, **fields: Any) -> None:
        with self._writing:
            with self._tx() as db:
                self._update(db, job_id, event, fields)
                row = self._written(db, job_id) if fields else None
            self._show(row)

    def _update(
        self, db: sqlite3.Connection, job_id: str, event: tuple[str, dict] | None, fields: dict
    ) -> None:
        if fields:
            sets = ", ".join(f"{name} = ?" for name in fields)
            db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))
        if "state" in fields:
            _event(
                db,
                job_id,
                "state",
                {
                    "state": fields["state"],
                    **({"error": fields["error"]} if fields.get("error") else {}),
                },
            )
        if event is not None:
            _event(db, job_id, *event)

    def _written(self, db: sqlite3.Connection, job_id: str) -> dict[str, Any] | None:
        """The job's row as this transaction wrote it (with the columns' defaults), for
        the view; None without one."""
        if self.view is None:
            return None
        row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return dict(row) if row else None

    def _show(self, row: dict[str, Any] | None) -> None:
        """Put a committed row in the view (still under ``_writing``: rows go in in the
        order their transactions committed)."""
        if row is not None:
            self.view._put(row)

    def job(self, job_id: str) -> dict[str, Any] | None:
        row = self._db().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return dict(row) if row else None

    def jobs(self, user: str | None = None, states: tuple[str, ...] | None = None) -> list[dict]:
        sql, args = "SELECT * FROM jobs WHERE 1=1", []
        if user is not None:
            sql, args = sql + " AND user = ?", [*args, user]
        if states:
            sql += f" AND state IN ({', '.join('?' * len(states))})"
            args += list(states)
        return [dict(r) for r in self._db().execute(sql + " ORDER BY created, id", args)]

    def known_module(self, model_sha256: str, target: str, latency_ms: float) -> dict | None:
        """A done job of the same model file and target whose module's estimate (from
        the store's records) meets ``latency_ms``: the fastest such."""
        row = (
            self._db()
            .execute(
                "SELECT * FROM jobs WHERE model_sha256 = ? AND target = ? AND state = 'done' "
                "AND estimate_ms IS NOT NULL AND estimate_ms <= ? ORDER BY estimate_ms LIMIT 1",
                (model_sha256, target, latency_ms),
            )
            .fetchone()
        )
        return dict(row) if row else None

    def events(self, job_id: str, after: int = 0, kind: str | None = None) -> list[dict]:
        sql, args = "SELECT * FROM events WHERE job_id = ? AND id > ?", [job_id, after]
        if kind:
            sql, args = sql + " AND kind = ?", [*args, kind]
        return [
            {"id": r["id"], "time": r["time"], "kind": r["kind"], **json.loads(r["data"])}
            for r in self._db().execute(sql + " ORDER BY id", args)
        ]


def _event(db: sqlite3.Connection, job_id: str, kind: str, data: dict) -> None:
    db.execute(
        "INSERT INTO events (job_id, time, kind, data) VALUES (?, ?, ?, ?)",
        (job_id, time.time(), kind, json.dumps(data, default=str)),
    )
