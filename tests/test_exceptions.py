"""Every exception class of simpletvm, scheduler and superb survives pickling with its
fields (worker processes and Ray actors send them to the driver), and each derives from
its package's base."""

from __future__ import annotations

import ast
import builtins
import importlib
import pickle
from pathlib import Path

import pytest

from scheduler.errors import SchedulerError
from simpletvm.errors import SimpleTVMError
from superb.errors import SuperbError

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {"simpletvm": SimpleTVMError, "scheduler": SchedulerError, "superb": SuperbError}


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def exception_classes() -> list[str]:
    """``module:Class`` of every class in the packages' sources that derives from an
    exception, found from the source so that a new one cannot be forgotten here."""
    known = {
        name
        for name in dir(builtins)
        if isinstance(getattr(builtins, name), type)
        and issubclass(getattr(builtins, name), BaseException)
    }
    classes: dict[str, ast.ClassDef] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    classes[f"{module}:{node.name}"] = node
    found: set[str] = set()
    while True:  # a subclass of a project exception is one too, in any module
        more = {
            key
            for key, node in classes.items()
            if key not in found and any(_base_name(base) in known for base in node.bases)
        }
        if not more:
            return sorted(found)
        found |= more
        known |= {key.split(":")[1] for key in more}


def sample(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` with every field set."""
    from simpletvm.tuning.plan import Phase
    from superb.grid import Problem

    if cls.__name__ == "GridError":
        return cls(
            [
                Problem("unknown parameter 'trails'", "grid.yaml:4"),
                Problem("malformed YAML", "grid.yaml:2"),
            ]
        )
    if cls.__name__ == "PlanOrderError":
        return cls("profiled", Phase.SELECT, Phase.PROFILE)
    if cls.__name__ == "FrontendError":
        return cls("TVM's TFLite frontend failed on EXPAND_DIMS", "EXPAND_DIMS")
    if cls.__name__ == "OperatorConversionError":
        return cls("EXPAND_DIMS", "tensor:0", "TypeError: no axis")
    if cls.__name__ == "ServiceError":
        return cls(404, "no job 'x' of yours")
    return cls("something went wrong")


def test_the_source_scan_finds_the_exceptions_of_each_package():
    found = exception_classes()
    assert {
        "scheduler.errors:WorkerDied",
        "superb.grid:GridError",
        "superb.results:ExperimentBusy",
        "simpletvm.errors:FlowError",
    } <= set(found)


@pytest.mark.parametrize("name", exception_classes())
def test_exception_pickles_with_its_fields(name):
    module, _, class_name = name.partition(":")
    cls = getattr(importlib.import_module(module), class_name)
    error = sample(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert copy.args == error.args and vars(copy) == vars(error)
    assert str(copy) == str(error)
    assert issubclass(cls, PACKAGES[module.split(".")[0]])


def test_worker_died_keeps_its_reason_through_pickling():
    from scheduler import WorkerDied

    copy = pickle.loads(pickle.dumps(WorkerDied("killed by SIGKILL")))
    assert copy.reason == "killed by SIGKILL" and isinstance(copy, SchedulerError)


def test_grid_error_keeps_its_problems_through_pickling():
    from superb.grid import GridError, Problem

    problems = [Problem("b", "grid.yaml:9"), Problem("a", "grid.yaml:3")]
    copy = pickle.loads(pickle.dumps(GridError(problems)))
    assert copy.problems == sorted(problems, key=lambda p: p.where)
    assert str(copy) == "grid.yaml:3: a\ngrid.yaml:9: b"


def test_an_errors_gist_is_its_last_line_naming_an_error():
    from simpletvm.errors import error_gist

    tvm_like = RuntimeError(
        "Traceback (most recent call last):\n  3: frame\n  2: frame\n"
        "ScheduleError: An error occurred in the schedule primitive 'split'.\n"
        "  The loop's extent is not divisible\n"
    )
    assert (
        error_gist(tvm_like)
        == "ScheduleError: An error occurred in the schedule primitive 'split'."
    )
    assert error_gist(ValueError("no error word here\nlast line")) == "last line"
    assert error_gist(ValueError("")) == ""
    assert len(error_gist(ValueError("Error " + "x" * 500))) == 300
