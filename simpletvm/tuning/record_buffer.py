"""A record store whose writes wait for the store's single writer: what a tuning job on
another machine (or a job whose records go to its driver) measures into."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simpletvm._process.scratch import make_scratch_dir
from simpletvm.tuning.records import RecordStore, canonical_json, record_latency


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
