"""Tuning records on disk: append-only JSON lines that many processes share safely.

A record store is a directory with ``workloads.jsonl`` (one line per distinct tuned
PrimFunc, keyed by its structural hash) and ``records.jsonl`` (one line per measured
candidate). Appends take a file lock and write whole lines; a torn last line left by
a killed process is skipped on read. MetaSchedule consumes them as a MemoryDatabase.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable

from ..store import append_lines, file_lock, read_json_lines


def new_database():
    """An empty in-memory MetaSchedule database (structural module equality: in TVM 0.27
    "anchor-block" merges 19 ResNet-18 tasks into 15, but applying a record to a task
    with another epilogue fails in ``TranslateAddOutputRVs`` at build time)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.database.MemoryDatabase()


def target_key(target_json: Any) -> str:
    """What makes records of two targets interchangeable: kind plus CPU/GPU arch."""
    spec = target_json if isinstance(target_json, dict) else json.loads(str(target_json))
    host = spec.get("host")
    parts = [spec.get("kind", "?"), str(spec.get("mcpu", "")), str(spec.get("arch", ""))]
    if isinstance(host, dict) and spec.get("kind") != "llvm":
        parts.append(str(host.get("mcpu", "")))
    return "/".join(parts)


def _target_json(target) -> dict:
    return json.loads(str(target))  # a Target prints as its JSON spec


class RecordStore:
    """One directory of tuning records (a run's, the global one, or the best-only one)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._workloads_written: set[str] = set()

    @property
    def workloads_path(self) -> Path:
        return self.directory / "workloads.jsonl"

    @property
    def records_path(self) -> Path:
        return self.directory / "records.jsonl"

    def __repr__(self) -> str:
        return f"RecordStore({str(self.directory)!r})"

    def workload_keys(self) -> set[str]:
        return {row["workload"] for row in read_json_lines(self.workloads_path)}

    def rows(self, target: Any = None) -> list[dict]:
        """Record rows, optionally only those whose target matches ``target``."""
        rows = read_json_lines(self.records_path)
        if target is None:
            return rows
        key = target_key(_target_json(target) if hasattr(target, "export") else target)
        return [row for row in rows if row.get("target_key") == key]

    def __len__(self) -> int:
        return len(read_json_lines(self.records_path))

    def append(self, workload, records: Iterable, run_id: str | None = None) -> int:
        """Add measured records of one workload (a ``ms.database.Workload``)."""
        workload_json = workload.as_json()
        key = str(workload_json[0])
        if key not in self._workloads_written and key not in self.workload_keys():
            append_lines(self.workloads_path,
                         [json.dumps({"workload": key, "json": list(workload_json)})])
        self._workloads_written.add(key)
        lines = []
        for record in records:
            record_json = record_as_json(record)
            lines.append(json.dumps({
                "workload": key,
                "record": record_json,
                "target_key": target_key(record_json[2]),
                "latency_s": _mean(record_json[1]),
                "run_id": run_id,
                "time": time.time(),
            }, default=float))
        append_lines(self.records_path, lines)
        return len(lines)

    def append_rows(self, workload_rows: list[dict], record_rows: list[dict]) -> None:
        """Copy raw rows from another store (merging), skipping workloads and records it
        already holds, so merging the same run twice adds nothing."""
        with file_lock(self.directory / "merge"):
            known = self.workload_keys()
            append_lines(self.workloads_path,
                         [json.dumps(row) for row in workload_rows if row["workload"] not in known])
            held = {_record_identity(row) for row in self.rows()}
            append_lines(self.records_path, [json.dumps(row) for row in record_rows
                                             if _record_identity(row) not in held])

    def merge_into(self, other: "RecordStore") -> int:
        """Append all of this store's records to ``other`` (finalization of a job)."""
        rows = read_json_lines(self.records_path)
        other.append_rows(read_json_lines(self.workloads_path), rows)
        return len(rows)

    def write_best_into(self, other: "RecordStore") -> int:
        """Append to ``other`` each workload's best record per target if it beats
        what ``other`` already holds."""
        best_known: dict[tuple[str, str], float] = {}
        for row in other.rows():
            if row.get("latency_s") is not None:
                key = (row["workload"], row["target_key"])
                best_known[key] = min(best_known.get(key, float("inf")), row["latency_s"])
        mine: dict[tuple[str, str], dict] = {}
        for row in self.rows():
            latency = row.get("latency_s")
            if latency is None:
                continue
            key = (row["workload"], row["target_key"])
            if latency < best_known.get(key, float("inf")) and (
                    key not in mine or latency < mine[key]["latency_s"]):
                mine[key] = row
        wanted = {key for key, _ in mine}
        workloads = [row for row in read_json_lines(self.workloads_path)
                     if row["workload"] in wanted]
        other.append_rows(workloads, list(mine.values()))
        return len(mine)

    def to_database(self, target: Any = None, database=None):
        """A MetaSchedule MemoryDatabase holding the (matching) records; pass
        ``database`` to add them to one that exists."""
        from tvm.s_tir import meta_schedule as ms

        database = database if database is not None else new_database()
        rows = [row for row in self.rows(target) if row.get("latency_s") is not None]
        if not rows:
            return database
        needed = {row["workload"] for row in rows}
        workloads = {}
        for row in read_json_lines(self.workloads_path):
            if row["workload"] in needed and row["workload"] not in workloads:
                try:
                    workload = ms.database.Workload.from_json(row["json"])
                except Exception:  # noqa: BLE001 - a corrupt line loses its records only
                    continue
                workloads[row["workload"]] = database.commit_workload(workload.mod)
        for row in rows:
            workload = workloads.get(row["workload"])
            if workload is None:
                continue
            try:
                database.commit_tuning_record(
                    ms.database.TuningRecord.from_json(row["record"], workload))
            except Exception:  # noqa: BLE001
                continue
        return database


def record_as_json(record) -> list:
    """A TuningRecord as plain JSON, the way MetaSchedule's own JSON database writes it:
    IR objects inside the trace (the index maps of weight-layout rewrites) become their
    ``tvm.ir.save_json`` text, which ``TuningRecord.from_json`` reads back."""
    import tvm
    from tvm.s_tir.meta_schedule.database import database as ms_database

    def plain(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            return value.value
        if isinstance(value, tvm.ir.Array):
            return [plain(item) for item in value]
        if isinstance(value, tvm.ir.Map):
            return {plain(key): plain(item) for key, item in value.items()}
        return tvm.ir.save_json(value)

    return plain(ms_database._ffi_api.TuningRecordAsJSON(record))


def _record_identity(row: dict) -> str:
    return json.dumps([row["workload"], row["record"]], sort_keys=True)


def _mean(run_secs: Any) -> float | None:
    values = [float(v) for v in (run_secs or [])]
    return sum(values) / len(values) if values else None
