"""What ran where and when: records, files, utilization, overlaps, Gantt charts."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.base import Failure, FailureCause, Resource, StageStatus, kind_of
from scheduler.state import JobStatus

if TYPE_CHECKING:
    import pandas


@dataclass(frozen=True)
class StageRecord:
    """One stage execution; times are seconds since the scheduler's run began."""

    job: str
    task: int
    iteration: int
    stage: str
    resource: str
    role: str
    start: float
    end: float
    status: StageStatus = StageStatus.OK
    error: str = ""

    @property
    def resource_kind(self) -> str:
        """ "client" or "device": the kind of resource the stage ran on."""
        return kind_of(self.role)


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended: ``status`` is "done" or "failed", and a failed job's
    ``failure`` says why (:class:`~scheduler.base.Failure`).

    ``arrived`` is when the job was ready for its first stage (built, if from a
    factory); ``finished`` when it completed or failed.
    """

    status: JobStatus
    arrived: float
    finished: float
    failure: Failure | None = None


_COLUMNS = [f.name for f in fields(StageRecord)]
_TYPES = {f.name: f.type for f in fields(StageRecord)}


def _atomic_write(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write via a temporary file and ``os.replace``, so a crash never leaves half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    binary = isinstance(data, bytes)
    with tempfile.NamedTemporaryFile(
        "wb" if binary else "w",
        dir=target.parent,
        prefix=f".{target.name}.",
        delete=False,
        **({} if binary else {"encoding": "utf-8", "newline": ""}),
    ) as handle:
        handle.write(data)
    os.replace(handle.name, target)


PLOT_INSTALL_HINT = "pip install matplotlib (or 'simpletvm[analysis]')"


@dataclass
class Trace:
    """The record of one scheduler run.

    ``exclusive`` is False for traces of a policy that oversubscribes resources on
    purpose (synchronous); overlaps in such a trace are the point, not a bug.
    """

    records: list[StageRecord] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    jobs: dict[str, JobOutcome] = field(default_factory=dict)
    retired: dict[str, str] = field(default_factory=dict)
    policy: str = ""
    exclusive: bool = True

    @property
    def makespan(self) -> float:
        """From the first stage's start to the last stage's end."""
        if not self.records:
            return 0.0
        return max(r.end for r in self.records) - min(r.start for r in self.records)

    @property
    def failed(self) -> dict[str, str]:
        """Failed jobs and why, in one line each."""
        return {job: str(o.failure) for job, o in self.jobs.items() if o.status == JobStatus.FAILED}

    def _capacity(self, name: str) -> int:
        for resource in self.resources:
            if resource.name == name:
                return resource.capacity
        return 1

    def busy_time(self, resource: str) -> float:
        """Seconds ``resource`` had at least one stage, weighted by used capacity."""
        capacity = self._capacity(resource)
        events = sorted(
            [(r.start, 1) for r in self.records if r.resource == resource]
            + [(r.end, -1) for r in self.records if r.resource == resource]
        )
        busy, level, last = 0.0, 0, 0.0
        for t, step in events:
            busy += min(level, capacity) / capacity * (t - last)
            level, last = level + step, t
        return busy

    def utilization(self) -> dict[str, float]:
        """Per resource, the fraction of the makespan it was busy (0..1)."""
        names = [r.name for r in self.resources] or sorted({r.resource for r in self.records})
        span = self.makespan
        return {name: (self.busy_time(name) / span if span else 0.0) for name in names}

    def overlaps(
        self, resource_kind: str | None = "device"
    ) -> list[tuple[StageRecord, StageRecord]]:
        """Pairs of stages that overlapped in time on one exclusive resource.

        Exclusive means capacity 1; ``resource_kind`` restricts the check to resources of
        that kind ("device" by default, None for all). Must be empty unless ``exclusive``
        is False.
        """
        by_resource: dict[str, list[StageRecord]] = {}
        for record in self.records:
            if (resource_kind is None or record.resource_kind == resource_kind) and self._capacity(
                record.resource
            ) == 1:
                by_resource.setdefault(record.resource, []).append(record)
        pairs: list[tuple[StageRecord, StageRecord]] = []
        for records in by_resource.values():
            records.sort(key=lambda r: (r.start, r.end))
            open_: list[StageRecord] = []
            for record in records:
                open_ = [o for o in open_ if o.end > record.start]
                pairs.extend((o, record) for o in open_ if record.end > o.start)
                open_.append(record)
        return pairs

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=_COLUMNS)
        writer.writeheader()
        writer.writerows(asdict(r) for r in self.records)
        _atomic_write(path, buffer.getvalue())

    @classmethod
    def from_csv(
        cls, path: str | os.PathLike[str], resources: Iterable[Resource] | None = None
    ) -> Trace:
        """Load records; without ``resources``, every resource is taken as capacity 1."""
        with open(path, newline="", encoding="utf-8") as handle:
            records = [_parse_record(row) for row in csv.DictReader(handle)]
        if resources is None:
            roles = {r.resource: r.role for r in records}
            resources = [Resource(name, role) for name, role in roles.items()]
        return cls(records=records, resources=list(resources))

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "exclusive": self.exclusive,
            "resources": [asdict(r) for r in self.resources],
            "jobs": {job: asdict(o) for job, o in self.jobs.items()},
            "retired": self.retired,
            "records": [asdict(r) for r in self.records],
        }

    def to_json(self, path: str | os.PathLike[str]) -> None:
        _atomic_write(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> Trace:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(
            records=[StageRecord(**r) for r in data["records"]],
            resources=[Resource(**r) for r in data["resources"]],
            jobs={job: _parse_outcome(o) for job, o in data["jobs"].items()},
            retired=data["retired"],
            policy=data["policy"],
            exclusive=data["exclusive"],
        )

    def to_frame(self) -> pandas.DataFrame:
        """The records as a pandas DataFrame, one row per stage."""
        import pandas

        return pandas.DataFrame([asdict(r) for r in self.records], columns=_COLUMNS)

    def gantt_png(self, path: str | os.PathLike[str], title: str | None = None) -> None:
        """Write the Gantt chart of ``draw_gantt`` as a PNG file (needs matplotlib, not
        installed by a plain ``pip install``: ImportError names the extra)."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as error:
            raise ImportError(f"the Gantt chart needs matplotlib: {PLOT_INSTALL_HINT}") from error

        names = [r.name for r in self.resources] or sorted({r.resource for r in self.records})
        figure = Figure(figsize=(12, 1.0 + 0.6 * len(names)))
        FigureCanvasAgg(figure)
        self.draw_gantt(figure.add_subplot(), title)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        _atomic_write(path, buffer.getvalue())

    def draw_gantt(self, axes, title: str | None = None) -> None:
        """Draw on matplotlib ``axes`` one row per resource, bars coloured by job and
        labelled by stage (thesis Fig. 8/10); notebooks draw it next to other plots."""
        from matplotlib import colormaps
        from matplotlib.patches import Patch

        names = [r.name for r in self.resources] or sorted({r.resource for r in self.records})
        jobs = list(dict.fromkeys(r.job for r in self.records))
        cmap = colormaps["tab20" if len(jobs) > 10 else "tab10"]
        colour = {job: cmap(i % cmap.N) for i, job in enumerate(jobs)}
        span = self.makespan or 1.0
        for row, name in enumerate(names):
            for record in (r for r in self.records if r.resource == name):
                width = record.end - record.start
                axes.barh(
                    row,
                    width,
                    left=record.start,
                    height=0.6,
                    color=colour[record.job],
                    edgecolor="red" if record.status != StageStatus.OK else "black",
                    linewidth=0.5,
                    hatch="//" if record.status != StageStatus.OK else None,
                )
                if width > 0.03 * span:
                    axes.text(
                        record.start + width / 2,
                        row,
                        record.stage[:1].upper(),
                        ha="center",
                        va="center",
                        fontsize=7,
                    )
        axes.set_yticks(range(len(names)), names)
        axes.invert_yaxis()
        axes.set_xlabel("time (s)")
        axes.set_title(title or f"{self.policy or 'trace'}: makespan {self.makespan:.1f} s")
        if len(jobs) <= 20:
            axes.legend(
                handles=[Patch(color=colour[j], label=j) for j in jobs],
                loc="upper left",
                bbox_to_anchor=(1.0, 1.0),
                fontsize=7,
            )


def _parse_record(row: dict[str, str]) -> StageRecord:
    converters = {"int": int, "float": float, "str": str, "StageStatus": StageStatus}
    return StageRecord(**{k: converters[str(_TYPES[k])](row[k]) for k in _COLUMNS})


def _parse_outcome(data: dict[str, Any]) -> JobOutcome:
    """A job's outcome from a trace's JSON. Traces written before failures had fields
    hold a failed job's one-line ``error`` and its ``cause``: that line becomes the
    failure's message, with no stage or resource."""
    status, arrived, finished = JobStatus(data["status"]), data["arrived"], data["finished"]
    if "failure" in data:
        failure = data["failure"]
        return JobOutcome(
            status,
            arrived,
            finished,
            failure
            and Failure(
                failure["stage"],
                failure["resource"],
                FailureCause(failure["cause"]),
                failure["message"],
            ),
        )
    failed = status == JobStatus.FAILED
    return JobOutcome(
        status,
        arrived,
        finished,
        Failure(None, None, FailureCause(data.get("cause") or FailureCause.STAGE), data["error"])
        if failed
        else None,
    )
