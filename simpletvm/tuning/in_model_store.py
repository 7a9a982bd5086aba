"""The in-model round's tables in the records database (:mod:`simpletvm.tuning.in_model`).

``in_model_choices``: per workload and target, the workload's last round: its challenger
then (the trace of its fastest record), the incumbent it was timed against (NULL: the
default schedule), both times, and the schedule chosen. ``in_model_forms``: per contested
layer (:mod:`simpletvm.compiler.conv_forms`) and target, the last round's form: the one
the kernels' estimate favoured then and the one chosen (NULL: direct). The record store
creates them with its own tables (:data:`SCHEMA`); only the round writes them, and a
build reads them through :class:`~simpletvm.tuning.database.RecordDatabase`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from simpletvm.tuning.records import RecordStore, canonical_json

SCHEMA = """
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
-- in_model held an older layout's findings (a record against its default only): they
-- choose nothing now, and the next round times every task again
DROP TABLE IF EXISTS in_model;
"""


@dataclass(frozen=True)
class InModelChoice:
    """A workload's last round: the trace (canonical JSON) of its challenger then, and
    the record chosen (None: the default schedule)."""

    challenger_trace: str
    chosen: list | None

    def answers(self, fastest: list) -> bool:
        """Whether the round was about ``fastest`` (a record's JSON); a later, faster
        record has not been timed inside the model yet."""
        return self.challenger_trace == canonical_json(fastest[0])


class InModelStore:
    """The round's choices and forms kept in ``records``' database."""

    def __init__(self, records: RecordStore):
        self.records = records

    def note_choice(
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
        """Keep a workload's round: ``challenger`` (its fastest record then) took
        ``challenger_s`` a model run, ``incumbent`` (the record chosen before; None: the
        default schedule) ``incumbent_s``, and the round chose one of them. Replaces the
        workload's earlier round; a workload the store lacks is refused (KeyError)."""
        chosen = challenger if challenger_chosen else incumbent
        with self.records.transaction() as connection:
            cursor = connection.execute(
                "INSERT OR REPLACE INTO in_model_choices (workload_id, target_key, challenger, "
                "challenger_s, incumbent, incumbent_s, chosen, run_id, time) "
                "SELECT id, ?, ?, ?, ?, ?, ?, ?, ? FROM workloads WHERE key = ?",
                (
                    target,
                    canonical_json(challenger[0]),
                    challenger_s,
                    None if incumbent is None else canonical_json(incumbent),
                    incumbent_s,
                    None if chosen is None else canonical_json(chosen),
                    run_id,
                    time.time(),
                    workload_key,
                ),
            )
            if cursor.rowcount == 0:
                raise KeyError(f"workload {workload_key} is not in the record store")

    def choice(self, workload_key: str, target: str) -> InModelChoice | None:
        """The workload's last round on ``target``, if any."""
        rows = self.records.read(
            "SELECT i.challenger, i.chosen FROM in_model_choices i "
            "JOIN workloads w ON w.id = i.workload_id WHERE w.key = ? AND i.target_key = ?",
            workload_key,
            target,
        )
        if not rows:
            return None
        challenger, chosen = rows[0]
        return InModelChoice(challenger, None if chosen is None else json.loads(chosen))

    def answer(
        self,
        workload_key: str,
        target: str,
        fastest: list[list],
        reading: str,
        planned: bool | None = None,
    ) -> list[list]:
        """The records a build applies to a workload whose fastest records are
        ``fastest`` (none: the default schedule). ``reading`` ``"chosen"``: what its last
        round chose, where that round timed its fastest record (a faster record not yet
        timed is applied as it is); ``"incumbent"``: what its last round chose, the
        schedule the next round times against. ``planned``: a round's choice not kept
        yet (True: the fastest record, False: the incumbent)."""
        choice = self.choice(workload_key, target)
        if reading == "incumbent" or planned is False:
            return [choice.chosen] if choice is not None and choice.chosen else []
        if planned or choice is None or not choice.answers(fastest[0]):
            return fastest
        return [choice.chosen] if choice.chosen else []

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
        with self.records.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO in_model_forms (layer, target_key, estimated, chosen, "
                "run_id, time) VALUES (?, ?, ?, ?, ?, ?)",
                (layer, target, estimated, chosen, run_id, time.time()),
            )

    def form(self, layer: str, target: str) -> tuple[int | None, int | None] | None:
        """A contested layer's last round on ``target``: (the form the estimate favoured
        then, the form chosen), or None before any round."""
        rows = self.records.read(
            "SELECT estimated, chosen FROM in_model_forms WHERE layer = ? AND target_key = ?",
            layer,
            target,
        )
        return (rows[0][0], rows[0][1]) if rows else None
