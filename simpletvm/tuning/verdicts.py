"""The records database as the book of schedule checks (:mod:`simpletvm.compiler.schedule_check`):
one target's verdicts, each kept beside the records so a build checks a kernel and
schedule once, and records carried to another machine keep their verdicts per target."""

from __future__ import annotations

import time

from simpletvm.compiler.schedule_check import Verdict
from simpletvm.tuning.records import RecordStore

# each schedule's check against the naive one, per target: created with the records'
# tables (:func:`simpletvm.tuning.records.schemas`)
SCHEMA = """
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
"""


class StoredVerdicts:
    """The verdicts of ``store`` on the target key ``target``."""

    def __init__(self, store: RecordStore, target: str):
        self.store = store
        self.target = target

    def schedule_verdict(self, workload: str, schedule: str) -> Verdict | None:
        rows = self.store.read(
            "SELECT ok, error, detail FROM schedule_checks "
            "WHERE workload = ? AND target_key = ? AND schedule = ?",
            workload,
            self.target,
            schedule,
        )
        return Verdict(bool(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    def note_schedule_verdict(self, workload: str, schedule: str, verdict: Verdict) -> None:
        with self.store.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO schedule_checks "
                "(workload, target_key, schedule, ok, error, detail, time) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    workload,
                    self.target,
                    schedule,
                    int(verdict.ok),
                    verdict.error,
                    verdict.detail,
                    time.time(),
                ),
            )

    def counts(self) -> dict[str, int]:
        """How many schedules this target's book holds as right and as wrong."""
        rows = self.store.read(
            "SELECT ok, COUNT(*) FROM schedule_checks WHERE target_key = ? GROUP BY ok",
            self.target,
        )
        found = {bool(ok): count for ok, count in rows}
        return {"right": found.get(True, 0), "wrong": found.get(False, 0)}
