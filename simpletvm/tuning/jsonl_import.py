"""Records in the legacy JSON-lines format, imported once into the SQLite store, so that a
store written in that format keeps its records.

The format has ``workloads.jsonl`` and ``records.jsonl`` per directory: each run's
(``runs/<run_id>/tuning/``), the global one and the best-only one (``database/global/``,
``database/best/``). The first process that opens a store's records imports them all in
one transaction (a record found in several directories becomes one row) and
notes it in the database, so no other process does it again. The directories are left
as they were.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simpletvm.store import iter_json_lines
from simpletvm.tuning.records import RecordStore, canonical_json, insert, record_latency

IMPORTED = "json_lines_imported"


def record_directories(root: Path) -> list[Path]:
    """The JSON-lines record directories under a store root, global and best first (or
    ``root`` itself when it is one)."""
    candidates = [
        root,
        root / "database" / "global",
        root / "database" / "best",
        *sorted((root / "runs").glob("*/tuning")),
    ]
    return [d for d in candidates if (d / "records.jsonl").exists()]


def import_once(records: RecordStore, directories: list[Path]) -> int:
    """Import ``directories`` into ``records`` unless the store has imported before;
    says so in one line on stderr. Returns how many records were added."""
    if records.meta(IMPORTED) is not None:
        return 0
    with records.transaction() as connection:
        if connection.execute("SELECT 1 FROM meta WHERE key = ?", (IMPORTED,)).fetchone():
            return 0  # another process imported while this one waited for the lock
        seen: set[tuple[str, str]] = set()
        added = sum(
            insert(connection, _first_copies(rows, seen), workloads)
            for rows, workloads in map(_rows, directories)
        )
        connection.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            (IMPORTED, f"{time.time():.0f} {added} records"),
        )
    if directories:
        print(
            f"simpletvm: imported {added} tuning records from {len(directories)} JSON-lines "
            f"directories under {os.path.commonpath(directories)} into {records.path}; "
            "the JSON-lines files are no longer read",
            file=sys.stderr,
        )
    return added


def _rows(directory: Path) -> tuple[Iterator[tuple[str, list, str | None, float]], dict[str, Any]]:
    workloads = {
        row["workload"]: row["json"]
        for row in iter_json_lines(directory / "workloads.jsonl")
        if isinstance(row, dict) and "workload" in row and "json" in row
    }
    # a run's own directory names the run; rows of jobs without a run id keep none
    run_id = directory.parent.name if directory.parent.parent.name == "runs" else None

    def rows() -> Iterator[tuple[str, list, str | None, float]]:
        for row in iter_json_lines(directory / "records.jsonl"):
            record = row.get("record") if isinstance(row, dict) else None
            if (
                isinstance(record, list)
                and len(record) >= 3
                and row.get("workload") in workloads
                and _measured(record)
            ):
                yield (
                    row["workload"],
                    record,
                    row.get("run_id") or run_id,
                    float(row.get("time") or 0.0),
                )

    return rows(), workloads


def _first_copies(
    rows: Iterator[tuple[str, list, str | None, float]], seen: set[tuple[str, str]]
) -> Iterator[tuple[str, list, str | None, float]]:
    """The rows whose record no earlier directory held: a record that several
    directories kept (a run's, the global one, the best one) is one measurement."""
    for row in rows:
        copy = (row[0], canonical_json(row[1]))
        if copy not in seen:
            seen.add(copy)
            yield row


def _measured(record: list) -> bool:
    try:
        return record_latency(record) is not None
    except (TypeError, ValueError):  # a garbled measurement: the row cannot be ranked
        return False
