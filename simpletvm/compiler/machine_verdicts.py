"""The schedule checks this machine has made, whichever store a build uses.

A verdict (:mod:`simpletvm.compiler.schedule_check`) depends only on the two kernels,
the target, the TVM that compiled them and the check itself, not on the store: a
default schedule checked once for one store is right for every store on this machine.
The records database keeps the verdicts that travel with the records; this book, in the
user's cache directory, spares each new store (a new sweep, a test, another project)
checking the same kernels again. Its key holds TVM's build and a digest of the check's
own code, so an upgrade of either starts it afresh. It is a cache: a book it cannot
open or write is passed over, and the check runs.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from functools import lru_cache
from pathlib import Path

from simpletvm.compiler import schedule_check
from simpletvm.compiler.schedule_check import Verdict, VerdictBook
from simpletvm.store import user_cache_dir

FILE_NAME = "schedule-checks.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    checker TEXT NOT NULL,
    target TEXT NOT NULL,
    workload TEXT NOT NULL,
    schedule TEXT NOT NULL,
    ok INTEGER NOT NULL,
    error REAL,
    detail TEXT NOT NULL,
    PRIMARY KEY (checker, target, workload, schedule)
)
"""
# how long a writer waits for another process's write (xdist workers, parallel builds)
BUSY_TIMEOUT_S = 30.0


@lru_cache(maxsize=1)
def checker_identity() -> str:
    """TVM's version and commit, and a digest of the code that decides a verdict."""
    import tvm

    from simpletvm import closeness

    info = tvm.support.libinfo()
    code = hashlib.sha256()
    for module in (schedule_check, closeness):
        code.update(Path(module.__file__).read_bytes())
    return f"{tvm.__version__}/{info.get('GIT_COMMIT_HASH', '')}/{code.hexdigest()[:16]}"


class MachineVerdicts:
    """The verdicts on one target (its TVM target string) in ``path`` (default: the
    user's cache directory)."""

    def __init__(self, target: str, path: Path | None = None):
        self.target = target
        self.path = path or user_cache_dir() / FILE_NAME
        self._ready = False  # the journal mode and the table are set up once per book

    def schedule_verdict(self, workload: str, schedule: str) -> Verdict | None:
        try:
            with self._connect() as connection:
                row = connection.execute(
                    "SELECT ok, error, detail FROM verdicts WHERE checker = ? AND target = ? "
                    "AND workload = ? AND schedule = ?",
                    (checker_identity(), self.target, workload, schedule),
                ).fetchone()
        except sqlite3.Error:
            return None
        return Verdict(bool(row[0]), row[1], row[2]) if row else None

    def note_schedule_verdict(self, workload: str, schedule: str, verdict: Verdict) -> None:
        try:
            with self._connect() as connection:
                connection.execute(
                    "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        checker_identity(),
                        self.target,
                        workload,
                        schedule,
                        int(verdict.ok),
                        verdict.error,
                        verdict.detail,
                    ),
                )
        except sqlite3.Error:
            return

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)) as connection:
            if not self._ready:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute(SCHEMA)
                self._ready = True
            with connection:  # one transaction, committed on leaving
                yield connection


class StoreThenMachine:
    """A store's verdict book backed by this machine's: a verdict the store lacks is
    taken from the machine's and written into the store's (so the store's book stays
    whole for the records it travels with); a new verdict goes into both."""

    def __init__(self, store: VerdictBook | None, machine: MachineVerdicts):
        self.store = store
        self.machine = machine

    def schedule_verdict(self, workload: str, schedule: str) -> Verdict | None:
        known = self.store.schedule_verdict(workload, schedule) if self.store else None
        if known is None:
            known = self.machine.schedule_verdict(workload, schedule)
            if known is not None and self.store is not None:
                self.store.note_schedule_verdict(workload, schedule, known)
        return known

    def note_schedule_verdict(self, workload: str, schedule: str, verdict: Verdict) -> None:
        if self.store is not None:
            self.store.note_schedule_verdict(workload, schedule, verdict)
        self.machine.note_schedule_verdict(workload, schedule, verdict)
