"""MetaSchedule's view of the record store: a ``PyDatabase`` over SQLite.

Tuning commits each measured record straight to the store under its run id, and the
search and the cost model read only what they ask for (a workload's top K, through an
index). A build's ``MetaScheduleApplyDatabase`` asks the same database for each
workload's fastest record. One database reads one scope for one target: every run's
records, one run's, or the best per workload only.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload

from simpletvm.compiler.lowering import extract_tasks, workload_key
from simpletvm.errors import RunNotFoundError
from simpletvm.tuning.in_model_store import InModelStore
from simpletvm.tuning.record_files import open_records
from simpletvm.tuning.records import RecordStore, canonical_json, tvm_target_key
from simpletvm.tuning.verdicts import StoredVerdicts

SCOPES = ("all", "run", "best")
# how a database answers a build: every fastest record (None), the choices of timing
# inside the model ("chosen"), or what was chosen before the next round ("incumbent")
IN_MODEL_READINGS = (None, "chosen", "incumbent")


@derived_object
class RecordDatabase(PyDatabase):
    """Records of ``records`` that match ``target`` (kind and arch), as MetaSchedule's
    database.

    Args:
        records: the store's records.
        target: the TVM target whose records are read (and written).
        scope: ``"all"`` records, only those of ``run_id`` (``"run"``), or the best
            record per workload (``"best"``).
        run_id: the run that committed records belong to (and ``"run"`` reads).
        in_model: for builds only (the search reads every record). ``"chosen"``: a
            workload whose fastest record was timed inside the built model
            (:mod:`simpletvm.tuning.in_model`) answers the schedule chosen there: that
            record, an earlier one, or none (the default schedule); a faster record not yet
            timed is answered as it is. ``"incumbent"``: each workload answers what its last
            round chose (none before any round), the schedule the next round times its
            fastest record against.
        planned: with ``"chosen"``, choices not kept yet, by workload key: True answers
            the workload's fastest record, False what its last round chose (the build of
            a round's choices, timed before the round keeps them).
    """

    def __init__(
        self,
        records: RecordStore,
        target,
        *,
        scope: str = "all",
        run_id: str | None = None,
        in_model: str | None = None,
        planned: dict[str, bool] | None = None,
    ):
        super().__init__()
        if scope not in SCOPES:
            raise ValueError(f"unknown record scope {scope!r}; valid: {', '.join(SCOPES)}")
        if in_model not in IN_MODEL_READINGS:
            raise ValueError(f"unknown in_model reading {in_model!r}; valid: chosen, incumbent")
        if scope == "run" and run_id is None:
            raise ValueError("the 'run' scope needs a run id")
        self.records = records
        self.scope = scope
        self.run_id = run_id
        self.target_key = tvm_target_key(target)
        self.target = target
        self.in_model = in_model
        self.planned = planned or {}
        self.in_model_store = InModelStore(records)
        self._workloads: dict[str, Workload] = {}
        self._workload_json: dict[str, Any] = {}
        self._stored_names: dict[str, list[str]] = {}  # by key: the stored workload's blocks
        self._commit_renaming: dict[str, tuple[Any, dict[str, str]]] = {}

    def has_workload(self, mod) -> bool:
        key = workload_key(mod)
        return key in self._workloads or self.records.workload_json(key) is not None

    def commit_workload(self, mod) -> Workload:
        key = workload_key(mod)
        if key not in self._workloads:
            self._workloads[key] = Workload(mod)
        return self._workloads[key]

    def commit_tuning_record(self, record: TuningRecord) -> None:
        self._commit(record, remeasured=False)

    def commit_remeasured(self, record: TuningRecord) -> None:
        """A new measurement of a record this run committed: it replaces the earlier one
        (a search's best can be a lucky timing; this one was not picked for its luck)."""
        self._commit(record, remeasured=True)

    def _commit(self, record: TuningRecord, remeasured: bool) -> None:
        key = workload_key(record.workload.mod)
        if key not in self._workload_json:
            self._workload_json[key] = record.workload.as_json()
        row = record_as_json(record)
        row[0] = renamed_trace(row[0], self._renaming_to_stored(key, record.workload.mod))
        self.records.add(
            key,
            self._workload_json[key],
            [row],
            run_id=self.run_id,
            remeasured=remeasured,
        )

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        if top_k <= 0:
            return []
        key = workload_key(workload.mod)
        rows = self._top_json(key, top_k)
        if self.in_model is not None and rows:
            rows = self._in_model_answer(key, rows)
        if not rows:
            return []
        here = {stored: own for own, stored in self._renaming_to_stored(key, workload.mod).items()}
        return [r for r in (_decoded(row, workload, here) for row in rows) if r is not None]

    def _renaming_to_stored(self, key: str, mod) -> dict[str, str]:
        """Block names of ``mod`` -> those of the workload stored under ``key``; kept
        for the workload a tuning commits and reads every record of (0.6 ms a listing)."""
        cached = self._commit_renaming.get(key)
        if cached is None or not cached[0].same_as(mod):
            names = block_names(mod)
            cached = self._commit_renaming[key] = (
                mod,
                dict(zip(names, self._block_names_stored(key, names))),
            )
        return cached[1]

    def _block_names_stored(self, key: str, names: list[str]) -> list[str]:
        """The block names of the workload stored under ``key`` (``names``, those of a
        workload of that key here, when none is stored yet).

        Structurally equal workloads share a key, but a block named after the tensor it
        reads (a reduction's ``lv148_red``) is named otherwise in another model, and a
        trace finds its blocks by name. Records are kept in the stored workload's names
        and read in the asking workload's, block for block in program order."""
        if key not in self._stored_names:
            stored = self.records.workload_json(key)
            if stored is None:
                return names
            self._stored_names[key] = block_names(Workload.from_json(stored).mod)
        return self._stored_names[key]

    def _in_model_answer(self, key: str, rows: list[list]) -> list[list]:
        return self.in_model_store.answer(
            key, self.target_key, rows, self.in_model, self.planned.get(key)
        )

    def in_model_schedule(self, mod) -> str | None:
        """What a build reading this database applies to workload ``mod`` after timing
        inside the model: ``"default"`` (its records lost there), ``"earlier record"``
        (its fastest record lost to one chosen before), or None (its fastest record, or
        no record)."""
        key = workload_key(mod)
        rows = self._top_json(key, 1)
        if self.in_model is None or not rows:
            return None
        answer = self._in_model_answer(key, rows)
        if not answer:
            return "default"
        applied, fastest = (canonical_json(row[0]) for row in (answer[0], rows[0]))
        return None if applied == fastest else "earlier record"

    def with_in_model_choices(self) -> RecordDatabase:
        """The same records, read as a build applies them: each workload gets the
        schedule timing inside the model chose, where its fastest record was timed."""
        return self._reading("chosen")

    def incumbents(self) -> RecordDatabase:
        """The same records, read as the schedules chosen before the next round inside
        the model: what its fastest records are timed against."""
        return self._reading("incumbent")

    def with_planned_choices(self, challengers_chosen: dict[Any, bool]) -> RecordDatabase:
        """The same records, read as a build would apply a round's choices before they
        are kept: workload module -> whether its fastest record is chosen (else what
        its last round chose); other workloads as :meth:`with_in_model_choices`."""
        planned = {workload_key(mod): chosen for mod, chosen in challengers_chosen.items()}
        return self._reading("chosen", planned)

    def _reading(self, in_model: str, planned: dict[str, bool] | None = None) -> RecordDatabase:
        return RecordDatabase(
            self.records,
            self.target,
            scope=self.scope,
            run_id=self.run_id,
            in_model=in_model,
            planned=planned,
        )

    def refuse_record(self, mod, reason: str) -> int:
        """Refuse the record this database answers for ``mod`` (a task module): its
        schedule computed a wrong answer. The next best record answers from now on."""
        record = self.query_tuning_record(mod, self.target, "main")
        if record is None:
            return 0
        key = workload_key(mod)
        trace = renamed_trace(record_as_json(record)[0], self._renaming_to_stored(key, mod))
        return self.records.refuse(key, self.target_key, trace, reason)

    def verdicts(self) -> StoredVerdicts:
        """The schedule checks kept beside these records, for this target."""
        return StoredVerdicts(self.records, self.target_key)

    def has_record(self, mod) -> bool:
        """Whether workload ``mod`` has a record here (the run's, or the store's)."""
        return bool(self._top_json(workload_key(mod), 1))

    def note_in_model(
        self, mod, challenger_s: float, incumbent_s: float, *, challenger_chosen: bool
    ) -> bool:
        """Keep a round of timing inside the model for workload ``mod``: its fastest
        record here took ``challenger_s`` a model run, the schedule chosen before it
        (:meth:`incumbents`) ``incumbent_s``, and whether the round chose that record.
        Returns False, noting nothing, when the workload has no record here."""
        key = workload_key(mod)
        rows = self._top_json(key, 1)
        if not rows:
            return False
        choice = self.in_model_store.choice(key, self.target_key)
        self.in_model_store.note_choice(
            key,
            self.target_key,
            rows[0],
            challenger_s,
            None if choice is None else choice.chosen,
            incumbent_s,
            challenger_chosen=challenger_chosen,
            run_id=self.run_id,
        )
        return True

    def kept_form(self, layer: str) -> tuple[int | None, int | None] | None:
        """A contested layer's last round inside the model (``layer``: its key,
        :func:`~simpletvm.compiler.conv_forms.layer_key`): the form the kernels' estimate
        favoured then and the form chosen (Winograd tile size, None: direct), or None."""
        return self.in_model_store.form(layer, self.target_key)

    def note_form(self, layer: str, estimated: int | None, chosen: int | None) -> None:
        """Keep a round's form for a contested layer, as :meth:`kept_form` reads it."""
        self.in_model_store.note_form(layer, self.target_key, estimated, chosen, run_id=self.run_id)

    def _top_json(self, key: str, limit: int) -> list[list]:
        return self.records.top(
            key,
            self.target_key,
            limit,
            best_only=self.scope == "best",
            run_id=self.run_id if self.scope == "run" else None,
        )

    def get_all_tuning_records(self) -> list[TuningRecord]:
        records = []
        for key in self.records.workload_keys(self.target_key):
            workload = self._workloads.get(key) or Workload.from_json(
                self.records.workload_json(key)
            )
            records += self.get_top_k(workload, len(self))
        return records

    def __len__(self) -> int:
        return self.records.count(
            run_id=self.run_id if self.scope == "run" else None,
            target=self.target_key,
            best_only=self.scope == "best",
        )


def block_names(mod) -> list[str]:
    """The names of a workload's blocks (of its ``main``), in program order."""
    from tvm import s_tir

    schedule = s_tir.Schedule(mod)
    names = []

    def visit(parent) -> None:
        for child in schedule.get_child_blocks(parent):
            names.append(schedule.get(child).name_hint)
            visit(child)

    visit(schedule.get_sblock("root"))
    return names


def renamed_trace(trace: list, names: dict[str, str]) -> list:
    """A trace's JSON with the blocks it gets by name renamed by ``names`` (old: new)."""
    if all(old == new for old, new in names.items()):
        return trace
    instructions, decisions = trace
    renamed = [
        [kind, inputs, [names.get(attrs[0], attrs[0]), *attrs[1:]], outputs]
        if kind == "GetSBlock"
        else [kind, inputs, attrs, outputs]
        for kind, inputs, attrs, outputs in instructions
    ]
    return [renamed, decisions]


def _decoded(row: list, workload: Workload, names: dict[str, str]) -> TuningRecord | None:
    """A stored record read for ``workload``, its blocks renamed by ``names``; None when
    its trace does not apply to the workload (a record kept in other names before the
    store kept them in one workload's)."""
    from tvm.s_tir.schedule import ScheduleError

    renamed = renamed_trace(row[0], names)
    for trace in (renamed,) if renamed is row[0] else (renamed, row[0]):
        try:
            return TuningRecord.from_json([trace, *row[1:]], workload)
        except ScheduleError:
            continue
    return None


def record_as_json(record: TuningRecord) -> list:
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


def best_latency_s(database, task) -> float | None:
    """A tuning task's best measured latency in ``database`` (any MetaSchedule
    database): the mean run time of its fastest record, or None when it has none."""
    mod = task.dispatched[0]
    if not database.has_workload(mod):
        return None
    best = database.get_top_k(database.commit_workload(mod), 1)
    if not best or not best[0].run_secs:
        return None
    seconds = [float(s) for s in best[0].run_secs]
    return sum(seconds) / len(seconds)


def records_database(records: str, store: RecordStore, target, run_id: str) -> RecordDatabase:
    """The database a build reads, by what the user asked for: ``"global"`` (every run's
    records in ``store``), ``"best"``, ``"run"`` (run ``run_id``'s), another run's id, or
    the path of a records database or store directory. Anything else is refused with the
    choices."""
    if records in ("global", "best"):
        return RecordDatabase(store, target, scope="all" if records == "global" else "best")
    if records == "run" or store.has_run(records):
        return RecordDatabase(
            store, target, scope="run", run_id=run_id if records == "run" else records
        )
    if Path(records).expanduser().exists():
        return RecordDatabase(open_records(records), target)
    raise RunNotFoundError(
        f"build(records={records!r}): no run with that id has tuning records in "
        f"{store.path}, and no such path; use 'global', 'best', 'run', a run id, a "
        "records file or store directory, or none (untuned)"
    )


def applied_records(forms, records: str | None, store: RecordStore, target, run_id: str):
    """What a build applies, by ``records`` as build() takes it (None: untuned): the
    fused module, each contested layer in its chosen form, the database answering as
    the in-model round chose (None: untuned), and what the build step records of them
    (``conv_forms`` and :func:`records_match`'s)."""
    if records is None:
        return forms.default, None, {}
    database = records_database(records, store, target.tvm_target(), run_id)
    fused, choices = forms.choose(partial(best_latency_s, database), kept=database.kept_form)
    found = {"conv_forms": [choice.describe() for choice in choices]} if choices else {}
    database = database.with_in_model_choices()
    found.update(records_match(fused, target, database))
    return fused, database, found


def records_match(fused, target, database: RecordDatabase) -> dict[str, Any]:
    """What a build found in its records: how many records were there for this target
    (``records_loaded``), how many of the built module's tasks have one applied
    (``tasks_with_records`` of ``tasks``), how many records lost inside the model to the
    default schedule (``tasks_on_default_in_model``) or to an earlier record
    (``tasks_on_earlier_record_in_model``), and, when none has, why as far as the store
    tells (``records_mismatch``: ``"empty"``, no records at all; ``"target"``, records
    only for other targets or CPUs, named in ``records_targets``; ``"workloads"``,
    records for this target but of other tasks: another model or input shape)."""
    tasks = extract_tasks(fused, target)
    loaded = len(database)
    found = {
        "records_loaded": loaded,
        "tasks": len(tasks),
        "tasks_with_records": sum(best_latency_s(database, task) is not None for task in tasks),
    }
    if database.in_model:
        applied = [database.in_model_schedule(task.dispatched[0]) for task in tasks]
        found["tasks_on_default_in_model"] = applied.count("default")
        found["tasks_on_earlier_record_in_model"] = applied.count("earlier record")
    if found["tasks_with_records"] or found.get("tasks_on_default_in_model") or not tasks:
        return found
    if loaded:
        found["records_mismatch"] = "workloads"
        return found
    run_id = database.run_id if database.scope == "run" else None
    targets = (
        database.records.target_keys(run_id) if hasattr(database.records, "target_keys") else []
    )
    found["records_mismatch"] = "target" if targets else "empty"
    if targets:
        found["records_targets"] = targets
        found["target_key"] = database.target_key
    return found
