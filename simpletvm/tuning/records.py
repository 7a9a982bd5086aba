"""Tuning records of a store: one SQLite database that many processes share safely.

Its tables. ``workloads``: one row per tuned PrimFunc, keyed by its structural hash.
``records``: one row per measured candidate (workload, target key, latency, run id,
time, the record's JSON and an identity, of the run and the record, that makes a record
committed twice one row while two runs' equal measurements stay two).
``best``: each workload's fastest record per target, updated in the transaction that
inserts (or re-measures) a record, so it is never stale. ``refused``: records whose
schedule computed a wrong answer, which no query answers. The same file holds the tables
of the schedule checks (:mod:`simpletvm.tuning.verdicts`) and of the round inside the
model (:mod:`simpletvm.tuning.in_model_store`), created with these. A record measured
again by its run (tuning's closing round) replaces its row's measurement. A run's
records, all records and the best ones are queries, and a job reads the best N records
of its workloads through an index instead of reading the whole store. WAL mode lets
readers go on while a writer commits; a busy timeout queues writers. This module needs
no TVM: MetaSchedule reads the store through
:class:`simpletvm.tuning.database.RecordDatabase`; a job on another machine writes
through a :class:`~simpletvm.tuning.record_buffer.RecordBuffer`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

IDENTITIES = "record_identities"  # meta key: set once identities include the run
BUSY_TIMEOUT_S = 120  # a legacy import holds the write lock for a while; writers wait

SCHEMA = """
CREATE TABLE IF NOT EXISTS workloads (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    workload_id INTEGER NOT NULL REFERENCES workloads(id),
    target_key TEXT NOT NULL,
    latency_s REAL NOT NULL,
    run_id TEXT,
    time REAL NOT NULL,
    identity BLOB NOT NULL UNIQUE,
    json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_latency ON records (workload_id, target_key, latency_s);
CREATE INDEX IF NOT EXISTS records_by_run ON records (run_id, workload_id, target_key, latency_s);
CREATE TABLE IF NOT EXISTS best (
    workload_id INTEGER NOT NULL REFERENCES workloads(id),
    target_key TEXT NOT NULL,
    record_id INTEGER NOT NULL REFERENCES records(id),
    latency_s REAL NOT NULL,
    PRIMARY KEY (workload_id, target_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- records whose schedule computed a wrong answer (simpletvm.compiler.schedule_check):
-- no query answers them, and no best is one of them
CREATE TABLE IF NOT EXISTS refused (
    record_id INTEGER PRIMARY KEY REFERENCES records(id),
    reason TEXT NOT NULL,
    time REAL NOT NULL
);
"""

_UPDATE_BEST = """
INSERT INTO best (workload_id, target_key, record_id, latency_s) VALUES (?, ?, ?, ?)
ON CONFLICT (workload_id, target_key) DO UPDATE
SET record_id = excluded.record_id, latency_s = excluded.latency_s
WHERE excluded.latency_s < best.latency_s
"""

# after a record's latency changed, which may have risen: the best is looked up again
_RECOMPUTE_BEST = """
INSERT INTO best (workload_id, target_key, record_id, latency_s)
SELECT workload_id, target_key, id, latency_s FROM records
WHERE workload_id = ? AND target_key = ? AND id NOT IN (SELECT record_id FROM refused)
ORDER BY latency_s LIMIT 1
ON CONFLICT (workload_id, target_key) DO UPDATE
SET record_id = excluded.record_id, latency_s = excluded.latency_s
"""


_NOT_REFUSED = "r.id NOT IN (SELECT record_id FROM refused)"


def schemas() -> tuple[str, ...]:
    """The tables a store's database holds: the records' own, the schedule checks' and
    the round inside the model's (their modules build on this one, so they are read
    here when a connection opens)."""
    from simpletvm.tuning import in_model_store, verdicts

    return SCHEMA, verdicts.SCHEMA, in_model_store.SCHEMA


def target_key(target_json: Any) -> str:
    """What makes records of two targets interchangeable: kind plus CPU/GPU arch."""
    spec = target_json if isinstance(target_json, dict) else json.loads(str(target_json))
    host = spec.get("host")
    parts = [spec.get("kind", "?"), str(spec.get("mcpu", "")), str(spec.get("arch", ""))]
    if isinstance(host, dict) and spec.get("kind") != "llvm":
        parts.append(str(host.get("mcpu", "")))
    return "/".join(parts)


def tvm_target_key(target: Any) -> str:
    """:func:`target_key` of a TVM Target (which prints as its JSON)."""
    return target_key(json.loads(str(target)))


def record_latency(record_json: list) -> float | None:
    """Mean measured seconds of a record's JSON (None: it has no measurement)."""
    values = [float(v) for v in (record_json[1] or [])]
    return sum(values) / len(values) if values else None


def canonical_json(value: Any) -> str:
    """One text per JSON value, so equal records get equal identities."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=float)


class RecordStore:
    """The tuning records of one store, in the SQLite file ``path``.

    Cheap to create and picklable: each process (and thread) opens its own connection
    on first use.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"RecordStore({str(self.path)!r})"

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    # ---- writing --------------------------------------------------------------------
    def add(
        self,
        workload_key: str,
        workload_json: Any,
        records: Iterable[list],
        run_id: str | None = None,
        remeasured: bool = False,
    ) -> int:
        """Add measured records (TuningRecord JSON) of one workload in one transaction;
        returns how many were new. Records without a measurement are not kept.

        ``remeasured``: the records are new measurements of records ``run_id`` added
        before; each replaces the measurement of the run's row with the same trace and
        target (a record without one is added)."""
        now = time.time()
        rows = [(workload_key, record, run_id, now) for record in records]
        with self.transaction() as connection:
            if remeasured:
                return replace_measurements(connection, rows, {workload_key: workload_json})
            return insert(connection, rows, {workload_key: workload_json})

    def refuse(self, workload_key: str, target: str, trace: list, reason: str) -> int:
        """Refuse the records of a workload on a target key whose trace is ``trace``:
        no query answers them again, and the workload's best is looked up anew.
        Returns how many rows were refused."""
        text = canonical_json(trace)
        with self.transaction() as connection:
            row = connection.execute("SELECT id FROM workloads WHERE key = ?", (workload_key,))
            found = row.fetchone()
            if found is None:
                return 0
            ids = [
                row_id
                for row_id, record in connection.execute(
                    "SELECT id, json FROM records WHERE workload_id = ? AND target_key = ?",
                    (found[0], target),
                )
                if canonical_json(json.loads(record)[0]) == text
            ]
            connection.executemany(
                "INSERT OR IGNORE INTO refused (record_id, reason, time) VALUES (?, ?, ?)",
                [(row_id, reason, time.time()) for row_id in ids],
            )
            connection.execute(
                "DELETE FROM best WHERE workload_id = ? AND target_key = ?", (found[0], target)
            )
            connection.execute(_RECOMPUTE_BEST, (found[0], target))
        return len(ids)

    def read(self, sql: str, *args: Any) -> list[tuple]:
        """The rows of a read-only query (tables: the module's docstring)."""
        return self._connection().execute(sql, args).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: it takes the write lock at once (no upgrade deadlocks)."""
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    # ---- reading --------------------------------------------------------------------
    def workload_json(self, key: str) -> Any | None:
        row = self._one("SELECT json FROM workloads WHERE key = ?", key)
        return json.loads(row[0]) if row else None

    def top(
        self,
        workload_key: str,
        target: str,
        limit: int,
        *,
        run_id: str | None = None,
        best_only: bool = False,
    ) -> list[list]:
        """The fastest records of a workload on a target key, fastest first: of all
        runs, of one run, or only the best one."""
        if best_only:
            sql = (
                "SELECT r.json FROM best b JOIN records r ON r.id = b.record_id "
                "JOIN workloads w ON w.id = b.workload_id "
                "WHERE w.key = ? AND b.target_key = ? LIMIT ?"
            )
            args: tuple = (workload_key, target, limit)
        elif run_id is not None:
            sql = (
                "SELECT r.json FROM records r JOIN workloads w ON w.id = r.workload_id "
                "WHERE r.run_id = ? AND w.key = ? AND r.target_key = ? "
                f"AND {_NOT_REFUSED} ORDER BY r.latency_s LIMIT ?"
            )
            args = (run_id, workload_key, target, limit)
        else:
            sql = (
                "SELECT r.json FROM records r JOIN workloads w ON w.id = r.workload_id "
                f"WHERE w.key = ? AND r.target_key = ? AND {_NOT_REFUSED} "
                "ORDER BY r.latency_s LIMIT ?"
            )
            args = (workload_key, target, limit)
        return [json.loads(text) for (text,) in self._connection().execute(sql, args)]

    def best(self, target: str | None = None) -> dict[tuple[str, str], float]:
        """(workload key, target key) -> the best latency, for one target key or all."""
        sql = (
            "SELECT w.key, b.target_key, b.latency_s FROM best b "
            "JOIN workloads w ON w.id = b.workload_id"
        )
        args: tuple = ()
        if target is not None:
            sql, args = sql + " WHERE b.target_key = ?", (target,)
        return {
            (key, target_key_): latency
            for key, target_key_, latency in self._connection().execute(sql, args)
        }

    def workload_keys(self, target: str | None = None) -> list[str]:
        """Keys of the workloads that have records (on one target key, or any)."""
        sql = "SELECT DISTINCT w.key FROM best b JOIN workloads w ON w.id = b.workload_id"
        args: tuple = ()
        if target is not None:
            sql, args = sql + " WHERE b.target_key = ?", (target,)
        return [key for (key,) in self._connection().execute(sql, args)]

    def count(
        self, *, run_id: str | None = None, target: str | None = None, best_only: bool = False
    ) -> int:
        """How many records (of one run, of one target key, or best ones) there are."""
        table = "best" if best_only else "records"
        clauses, args = [], []
        if run_id is not None and not best_only:
            clauses.append("run_id = ?")
            args.append(run_id)
        if target is not None:
            clauses.append("target_key = ?")
            args.append(target)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._one(f"SELECT COUNT(*) FROM {table}{where}", *args)[0]

    def __len__(self) -> int:
        return self.count()

    def target_keys(self, run_id: str | None = None) -> list[str]:
        """The target keys records are kept for (of one run, or of all)."""
        sql = "SELECT DISTINCT target_key FROM records"
        args: tuple = ()
        if run_id is not None:
            sql, args = sql + " WHERE run_id = ?", (run_id,)
        return sorted(key for (key,) in self._connection().execute(sql, args))

    def run_counts(self, run_id: str) -> dict[str, int]:
        """Workload key -> records one run measured (what a resumed run has done)."""
        rows = self._connection().execute(
            "SELECT w.key, COUNT(*) FROM records r JOIN workloads w ON w.id = r.workload_id "
            "WHERE r.run_id = ? GROUP BY r.workload_id",
            (run_id,),
        )
        return dict(rows.fetchall())

    def has_run(self, run_id: str) -> bool:
        return self._one("SELECT 1 FROM records WHERE run_id = ? LIMIT 1", run_id) is not None

    def meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = ?", key)
        return row[0] if row else None

    # ---- connections ----------------------------------------------------------------
    def close(self) -> None:
        """Close this thread's connection (the next use opens another)."""
        local = self._local
        if getattr(local, "pid", None) == os.getpid():
            local.connection.close()
        local.connection = local.pid = None

    def _one(self, sql: str, *args: Any) -> tuple | None:
        return self._connection().execute(sql, args).fetchone()

    def _connection(self) -> sqlite3.Connection:
        local = self._local
        if getattr(local, "pid", None) != os.getpid():  # never reuse one across a fork
            from simpletvm.store import file_lock

            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            # switching a new file to WAL answers "database is locked" at once, without
            # the busy timeout, when another process does the same: set up one at a time
            with file_lock(self.path):
                connection.execute("PRAGMA journal_mode = WAL")
                for schema in schemas():
                    connection.executescript(schema)
                _scope_identities_by_run(connection)
            # WAL + NORMAL: a killed process loses nothing committed; only a power cut can
            # drop the last transactions, and never corrupts the file
            connection.execute("PRAGMA synchronous = NORMAL")
            local.connection, local.pid = connection, os.getpid()
        return local.connection


def insert(
    connection: sqlite3.Connection,
    rows: Iterable[tuple[str, list, str | None, float]],
    workloads: dict[str, Any],
) -> int:
    """Insert ``(workload key, record JSON, run id, time)`` rows inside the caller's
    transaction and keep ``best`` current; ``workloads`` holds the JSON of workloads the
    database may not know yet. Returns how many records were new."""
    ids: dict[str, int] = {}
    added = 0
    for key, record, run_id, at in rows:
        latency = record_latency(record)
        if latency is None:
            continue
        if key not in ids:
            ids[key] = _workload_id(connection, key, workloads.get(key))
        text = canonical_json(record)
        identity = _identity(key, run_id, text)
        target = target_key(record[2])
        cursor = connection.execute(
            "INSERT INTO records (workload_id, target_key, latency_s, run_id, time, identity,"
            " json) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (identity) DO NOTHING",
            (ids[key], target, latency, run_id, at, identity, text),
        )
        if cursor.rowcount == 1:
            connection.execute(_UPDATE_BEST, (ids[key], target, cursor.lastrowid, latency))
            added += 1
    return added


def replace_measurements(
    connection: sqlite3.Connection,
    rows: Iterable[tuple[str, list, str | None, float]],
    workloads: dict[str, Any],
) -> int:
    """Like :func:`insert`, for new measurements of records the rows' runs added: each
    replaces the latency, JSON and identity of the run's row with the same trace and
    target, and the workload's best is recomputed (a measurement may have risen). A
    record the run does not have is inserted. Returns how many were new."""
    added = 0
    for key, record, run_id, at in rows:
        latency = record_latency(record)
        if latency is None:
            continue
        workload_id = _workload_id(connection, key, workloads.get(key))
        target = target_key(record[2])
        trace = canonical_json(record[0])
        earlier = next(
            (
                row_id
                for row_id, text in connection.execute(
                    "SELECT id, json FROM records WHERE workload_id = ? AND target_key = ? "
                    "AND run_id IS ?",
                    (workload_id, target, run_id),
                )
                if canonical_json(json.loads(text)[0]) == trace
            ),
            None,
        )
        if earlier is None:
            added += insert(connection, [(key, record, run_id, at)], workloads)
            continue
        text = canonical_json(record)
        connection.execute(
            "UPDATE OR IGNORE records SET latency_s = ?, json = ?, identity = ?, time = ? "
            "WHERE id = ?",
            (latency, text, _identity(key, run_id, text), at, earlier),
        )
        connection.execute(_RECOMPUTE_BEST, (workload_id, target))
    return added


def _identity(key: str, run_id: str | None, text: str) -> bytes:
    # tiny kernels measure in 10 ns steps: two runs can time one trace alike
    scope = "" if run_id is None else f"{run_id}\n"
    return hashlib.blake2b(f"{key}\n{scope}{text}".encode(), digest_size=16).digest()


def _scope_identities_by_run(connection: sqlite3.Connection) -> None:
    """Give a database whose identities leave the run out (the legacy scheme, under
    which two runs' equal measurements are one row) identities scoped by run, once."""
    if connection.execute("SELECT 1 FROM meta WHERE key = ?", (IDENTITIES,)).fetchone():
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        rows = connection.execute(
            "SELECT r.id, w.key, r.run_id, r.json FROM records r JOIN workloads w "
            "ON w.id = r.workload_id WHERE r.run_id IS NOT NULL"
        ).fetchall()
        connection.executemany(
            "UPDATE records SET identity = ? WHERE id = ?",
            [(_identity(key, run_id, text), row_id) for row_id, key, run_id, text in rows],
        )
        connection.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (IDENTITIES, "by run"))
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _workload_id(connection: sqlite3.Connection, key: str, workload_json: Any) -> int:
    row = connection.execute("SELECT id FROM workloads WHERE key = ?", (key,)).fetchone()
    if row is not None:
        return row[0]
    if workload_json is None:
        raise KeyError(f"workload {key} is not in the record store and no JSON was given")
    return connection.execute(
        "INSERT INTO workloads (key, json) VALUES (?, ?)", (key, canonical_json(workload_json))
    ).lastrowid
