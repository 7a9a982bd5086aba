"""Tuning records of a store: one SQLite database that many processes share safely.

Its tables. ``workloads``: one row per tuned PrimFunc, keyed by its structural hash.
``records``: one row per measured candidate (workload, target key, latency, run id,
time, the record's JSON and an identity, of the run and the record, that makes a record
committed twice one row while two runs' equal measurements stay two).
``best``: each workload's fastest record per target, updated in the transaction that
inserts (or re-measures) a record, so it is never stale. ``in_model_choices``: per
workload and target, the last round of timing inside the built model
(:mod:`simpletvm.tuning.in_model`): the fastest record then (its trace), the schedule it
was timed against (the one chosen before; NULL: the default schedule), both times, and
the one chosen. ``refused``: records whose schedule computed a wrong answer, which no query answers;
``schedule_checks``: each schedule's check against TVM's naive one, per target
(:mod:`simpletvm.tuning.verdicts`). ``in_model_forms``: per contested layer (:mod:`simpletvm.compiler.conv_forms`)
and target, the last round's form: the one the kernels' estimate favoured then and the
one chosen (NULL: direct). A record measured again by its run (tuning's closing round) replaces its
row's measurement. A run's records, all
records and the best ones are queries, and a job reads the best N records of its workloads through an index
instead of reading the whole store. WAL mode lets readers go on while a writer commits;
a busy timeout queues writers. This module needs no TVM: MetaSchedule reads the store
through :class:`simpletvm.tuning.database.RecordDatabase`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simpletvm._process.scratch import make_scratch_dir

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
CREATE TABLE IF NOT EXISTS in_model_choices (
    workload_id INTEGER NOT NULL REFERENCES workloads(id),
    target_key TEXT NOT NULL,
    challenger TEXT NOT NULL,
    challenger_s REAL NOT NULL,
    incumbent TEXT,
    incumbent_s REAL NOT NULL,
    chosen TEXT,
    run_id TEXT,
    time REAL NOT NULL,
    PRIMARY KEY (workload_id, target_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS in_model_forms (
    layer TEXT NOT NULL,
    target_key TEXT NOT NULL,
    estimated INTEGER,
    chosen INTEGER,
    run_id TEXT,
    time REAL NOT NULL,
    PRIMARY KEY (layer, target_key)
) WITHOUT ROWID;
-- records whose schedule computed a wrong answer (simpletvm.compiler.schedule_check):
-- no query answers them, and no best is one of them
CREATE TABLE IF NOT EXISTS refused (
    record_id INTEGER PRIMARY KEY REFERENCES records(id),
    reason TEXT NOT NULL,
    time REAL NOT NULL
);
-- each schedule's check against the naive one, per target (simpletvm.tuning.verdicts)
CREATE TABLE IF NOT EXISTS schedule_checks (
    workload TEXT NOT NULL,
    target_key TEXT NOT NULL,
    schedule TEXT NOT NULL,
    ok INTEGER NOT NULL,
    error REAL,
    detail TEXT NOT NULL,
    time REAL NOT NULL,
    PRIMARY KEY (workload, target_key, schedule)
) WITHOUT ROWID;
-- in_model held an older layout's findings (a record against its default only): they
-- choose nothing now, and the next round times every task again
DROP TABLE IF EXISTS in_model;
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

    def note_in_model(
        self,
        workload_key: str,
        target: str,
        challenger: list,
        challenger_s: float,
        incumbent: list | None,
        incumbent_s: float,
        *,
        challenger_chosen: bool,
        run_id: str | None = None,
    ) -> None:
        """Keep a round of timing inside the model for a workload: ``challenger`` (its
        fastest record then) took ``challenger_s`` a model run, ``incumbent`` (the record
        chosen before; None: the default schedule) ``incumbent_s``, and the round chose
        the challenger or kept the incumbent (:func:`simpletvm.tuning.in_model.round_choices`
        decides). Replaces the workload's earlier round."""
        chosen = challenger if challenger_chosen else incumbent
        with self.transaction() as connection:
            workload_id = _workload_id(connection, workload_key, None)
            connection.execute(
                "INSERT OR REPLACE INTO in_model_choices (workload_id, target_key, challenger, "
                "challenger_s, incumbent, incumbent_s, chosen, run_id, time) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    workload_id,
                    target,
                    canonical_json(challenger[0]),
                    challenger_s,
                    None if incumbent is None else canonical_json(incumbent),
                    incumbent_s,
                    None if chosen is None else canonical_json(chosen),
                    run_id,
                    time.time(),
                ),
            )

    def in_model_choice(self, workload_key: str, target: str) -> InModelChoice | None:
        """The workload's last round of timing inside the model on ``target``, if any."""
        row = self._one(
            "SELECT i.challenger, i.chosen FROM in_model_choices i "
            "JOIN workloads w ON w.id = i.workload_id WHERE w.key = ? AND i.target_key = ?",
            workload_key,
            target,
        )
        if row is None:
            return None
        return InModelChoice(row[0], None if row[1] is None else json.loads(row[1]))

    def note_form(
        self,
        layer: str,
        target: str,
        estimated: int | None,
        chosen: int | None,
        *,
        run_id: str | None = None,
    ) -> None:
        """Keep a round's form for a contested ``layer`` (its key): the Winograd tile size
        the kernels' estimate favoured (None: direct) and the one the round chose.
        Replaces the layer's earlier round."""
        with self.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO in_model_forms (layer, target_key, estimated, chosen, "
                "run_id, time) VALUES (?, ?, ?, ?, ?, ?)",
                (layer, target, estimated, chosen, run_id, time.time()),
            )

    def in_model_form(self, layer: str, target: str) -> tuple[int | None, int | None] | None:
        """A contested layer's last round on ``target``: (the form the estimate favoured
        then, the form chosen), or None before any round."""
        row = self._one(
            "SELECT estimated, chosen FROM in_model_forms WHERE layer = ? AND target_key = ?",
            layer,
            target,
        )
        return None if row is None else (row[0], row[1])

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
                connection.executescript(SCHEMA)
                _scope_identities_by_run(connection)
            # WAL + NORMAL: a killed process loses nothing committed; only a power cut can
            # drop the last transactions, and never corrupts the file
            connection.execute("PRAGMA synchronous = NORMAL")
            local.connection, local.pid = connection, os.getpid()
        return local.connection


class RecordBuffer(RecordStore):
    """A store whose writes wait to be collected (:meth:`drain`) instead of reaching its
    database: a job on another machine hands its measured records to the process that
    owns the store with each stage's outcome, so that process is the single writer and
    no shared file system is needed for records.

    Reads go to ``path`` as usual, except a run's own records (what its build and a
    resumed search ask for), which a private copy in this process answers too."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(path)
        self._pending: list[tuple[str, Any, list[list], str | None, bool]] = []
        self._own: RecordStore | None = None

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def add(
        self,
        workload_key: str,
        workload_json: Any,
        records: Iterable[list],
        run_id: str | None = None,
        remeasured: bool = False,
    ) -> int:
        records = list(records)
        self._pending.append((workload_key, workload_json, records, run_id, remeasured))
        if self._own is None:
            self._own = RecordStore(Path(make_scratch_dir("records")) / "own.sqlite")
        return self._own.add(workload_key, workload_json, records, run_id, remeasured)

    def drain(self) -> list[tuple[str, Any, list[list], str | None, bool]]:
        """The writes since the last drain, as :meth:`RecordStore.add`'s arguments."""
        pending, self._pending = self._pending, []
        return pending

    def close(self) -> None:
        """Close this thread's connections, to the store and to the private copy (the
        next use opens them again: a build still reads the run's records)."""
        super().close()
        if self._own is not None:
            self._own.close()

    def discard(self) -> None:
        """Close the connections and delete the private copy, once nothing reads the
        run's records through this buffer any more (the writes not drained yet stay to
        be drained)."""
        self.close()
        if self._own is not None:
            shutil.rmtree(self._own.path.parent, ignore_errors=True)
            self._own = None

    def top(
        self,
        workload_key: str,
        target: str,
        limit: int,
        *,
        run_id: str | None = None,
        best_only: bool = False,
    ) -> list[list]:
        found = super().top(workload_key, target, limit, run_id=run_id, best_only=best_only)
        if run_id is None or self._own is None:
            return found
        own = self._own.top(workload_key, target, limit, run_id=run_id)
        # by trace: the own copy of a record re-measured since the last drain is newer
        merged = {canonical_json(record[0]): record for record in found + own}
        return sorted(merged.values(), key=lambda r: record_latency(r) or math.inf)[:limit]

    def workload_json(self, key: str) -> Any | None:
        found = super().workload_json(key)
        return found if found is not None or self._own is None else self._own.workload_json(key)

    def has_run(self, run_id: str) -> bool:
        return super().has_run(run_id) or (self._own is not None and self._own.has_run(run_id))

    def count(
        self, *, run_id: str | None = None, target: str | None = None, best_only: bool = False
    ) -> int:
        """The store's count, or for the run's own records the copy's when it has more
        (those not drained, or on a machine whose store never gets them)."""
        found = super().count(run_id=run_id, target=target, best_only=best_only)
        if run_id is None or best_only or self._own is None:
            return found
        return max(found, self._own.count(run_id=run_id, target=target))


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


@dataclass(frozen=True)
class InModelChoice:
    """A workload's last round inside the model: the trace (canonical JSON) of the record
    it timed as challenger, and the record chosen (None: the default schedule)."""

    challenger_trace: str
    chosen: list | None

    def answers(self, fastest: list) -> bool:
        """Whether the round was about ``fastest`` (a record's JSON); a later, faster
        record has not been timed inside the model yet."""
        return self.challenger_trace == canonical_json(fastest[0])


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
