"""A store's tuning records opened by path: a records database file as is, or a store
directory through its ``records.sqlite``, with any records under it in the legacy
JSON-lines format imported the first time, so a store written in that format keeps them."""

from __future__ import annotations

import os
from pathlib import Path

from simpletvm.store import RunStore
from simpletvm.tuning.jsonl_import import import_once, record_directories
from simpletvm.tuning.records import RecordStore


def open_records(path: str | os.PathLike) -> RecordStore:
    """The tuning records at ``path``: a records database file as is, or a directory
    (a store root, or a record directory in the legacy JSON-lines format) through its
    ``records.sqlite``, into which the JSON lines under it are imported the first time."""
    path = Path(path).expanduser()
    if path.is_file():
        return RecordStore(path)
    records = RecordStore(RunStore(path).records_path)
    import_once(records, record_directories(path))
    return records
