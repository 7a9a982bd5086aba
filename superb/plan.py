"""The plan: a grid's runs with stable keys, and the checks made before any of them runs.

A run's key is a hash of its parameters (and repetition), so the same command finds the
same runs again after a restart. :func:`preflight` checks what can be known without
running: model sources, targets and tuning options, and a named tracker's servers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .grid import Grid, GridError, Problem
from .parameters import PARAMETERS, calls_for

KEY_LENGTH = 12


def run_key(params: dict[str, Any], repetition: int = 1) -> str:
    """A stable key for a combination: the same parameters give the same key."""
    identity = dict(params)
    if repetition > 1:  # repetition 1 keeps its key when more repetitions are added later
        identity["#repetition"] = repetition
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]


@dataclass(frozen=True)
class Run:
    index: int  # 1-based position in the plan
    key: str
    params: dict[str, Any]
    repetition: int = 1

    @property
    def tuned(self) -> bool:
        return bool(self.params.get("autotune", True))

    def label(self, names: list[str] | None = None) -> str:
        names = names if names is not None else list(self.params)
        text = " ".join(f"{n}={_short(self.params[n])}" for n in names if n in self.params)
        return text + (f" rep={self.repetition}" if self.repetition > 1 else "")


@dataclass
class Plan:
    grid: Grid
    runs: list[Run]
    excluded: list[int] = field(default_factory=list)  # runs removed per exclude pattern

    @property
    def varying(self) -> list[str]:
        """The parameters that differ between runs (what a run's label shows)."""
        return [n for n in self.grid.axes if len(self.grid.axes[n]) > 1]

    def resolved_params(self, run: Run) -> dict[str, Any]:
        """A run's parameters with the model path made absolute (relative to the grid)."""
        params = dict(run.params)
        model = params.get("model")
        if isinstance(model, str) and _looks_like_path(model):
            candidate = Path(model).expanduser()
            if not candidate.is_absolute():
                candidate = self.grid.base_dir / candidate
            params["model"] = str(candidate)
        return params

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.grid.name,
            "count": len(self.runs),
            "excluded": sum(self.excluded),
            "runs": [
                {"index": r.index, "key": r.key, "repetition": r.repetition, "params": r.params}
                for r in self.runs
            ],
        }


def build_plan(grid: Grid) -> Plan:
    combos, removed = grid.expand()
    if not combos:
        raise GridError(
            [
                Problem(
                    "the exclude patterns remove every combination: nothing to run",
                    grid.where("exclude"),
                )
            ]
        )
    runs, seen = [], {}
    for repetition in range(1, grid.repetitions + 1):
        for params in combos:
            key = run_key(params, repetition)
            if key in seen:
                raise GridError(
                    [
                        Problem(
                            f"runs {seen[key]} and {len(runs) + 1} have the same parameters: an axis "
                            "repeats a value",
                            grid.where("grid"),
                        )
                    ]
                )
            seen[key] = len(runs) + 1
            runs.append(Run(len(runs) + 1, key, params, repetition))
    return Plan(grid, runs, removed)


def preflight(plan: Plan, tracker: tuple[str, int] | None = None) -> None:
    """Check model sources, targets, tuning options and the tracker; GridError if any fail.

    Imports SimpleTVM (and TVM, to know the host's CPU): call it when a sweep starts.
    """
    from simpletvm.errors import SimpleTVMError
    from simpletvm.models import detect_format
    from simpletvm.tuning.options import TuningOptions

    grid = plan.grid
    problems: list[Problem] = []
    checked: set[str] = set()

    def once(kind: str, value: Any) -> bool:
        token = kind + json.dumps(value, sort_keys=True, default=str)
        if token in checked:
            return False
        checked.add(token)
        return True

    keys_needed: set[str] = set()
    for run in plan.runs:
        params = plan.resolved_params(run)
        calls = calls_for(params)
        if once("model", params["model"]):
            try:
                detect_format(params["model"])
            except SimpleTVMError as error:
                problems.append(Problem(str(error), _place(grid, "model", run.params["model"])))
        context = calls["context"]
        target_id = [context.get("target"), context.get("cpu_arch"), context.get("num_threads")]
        if once("target", target_id):
            problems += _target_problems(grid, run, context, tracker, calls["evaluate"])
        if calls["autotune"] is not None:
            keys_needed.add(device_key(params))
            if once("autotune", calls["autotune"]):
                try:
                    TuningOptions.from_mapping(calls["autotune"])
                except (TypeError, ValueError) as error:
                    name = _parameter_named_in(str(error), calls["autotune"])
                    problems.append(
                        Problem(
                            f"run {run.index} ({run.label(plan.varying)}): {error}",
                            _place(grid, name, run.params.get(name)),
                        )
                    )
    if tracker is not None and keys_needed and not problems:
        problems += tracker_problems(tracker, sorted(keys_needed))
    if problems:
        raise GridError(problems)


def device_key(params: dict[str, Any]) -> str:
    """The RPC key a tuned run profiles under: its own, or superb's for the device type."""
    if params.get("device_key"):
        return params["device_key"]
    return f"superb-{device_type(params.get('target', 'cpu'))}"


def device_type(target: Any) -> str:
    if isinstance(target, dict):
        return "cuda" if target.get("kind") == "cuda" else "cpu"
    return "cuda" if str(target).lower() in ("cuda", "gpu") else "cpu"


def tracker_problems(tracker: tuple[str, int], keys: list[str]) -> list[Problem]:
    from simpletvm.errors import SimpleTVMError
    from simpletvm.remote.rpc import tracker_summary

    where = f"--tracker {tracker[0]}:{tracker[1]}"
    try:
        summary = tracker_summary(*tracker)
    except SimpleTVMError as error:
        return [Problem(str(error), where)]
    registered = summary.get("queue_info", {})
    return [
        Problem(
            f"no RPC server with key {key!r} is registered (keys there: "
            f"{sorted(registered)}); start one with `superb server --tracker "
            f"{tracker[0]}:{tracker[1]} --key {key}`",
            where,
        )
        for key in keys
        if key not in registered
    ]


def _target_problems(grid: Grid, run: Run, context: dict, tracker, evaluate) -> list[Problem]:
    from simpletvm.errors import SimpleTVMError
    from simpletvm.targets import resolve_target

    place = _place(grid, "target", run.params.get("target"))
    try:
        resolved = resolve_target(
            context["target"], context.get("cpu_arch"), context.get("num_threads")
        )
        resolved.tvm_target()
    except SimpleTVMError as error:
        return [Problem(str(error), place)]
    except Exception as error:  # noqa: BLE001 - TVM rejects a target dict in many ways
        return [Problem(f"TVM rejects target {context['target']!r}: {error}", place)]
    import tvm
    from tvm.target import codegen

    spec = resolved.spec if resolved.kind == "llvm" else resolved.spec.get("host", {})
    mcpu = spec.get("mcpu") if isinstance(spec, dict) else None
    if mcpu:
        triple = spec.get("mtriple") or codegen.llvm_get_system_triple()
        if not codegen.llvm_is_valid_cpu(mcpu, triple):
            return [
                Problem(
                    f"LLVM does not know the CPU {mcpu!r}{_suggest_cpu(mcpu)}",
                    _place(grid, "cpu_arch", run.params.get("cpu_arch"))
                    if run.params.get("cpu_arch")
                    else place,
                )
            ]
    if resolved.device_type == "cuda" and (evaluate is not None or tracker is None):
        if not tvm.cuda(0).exist:
            return [
                Problem(
                    "target cuda needs an NVIDIA GPU on this machine, and none is visible to TVM",
                    place,
                )
            ]
    return []


def _suggest_cpu(name: str) -> str:
    import tvm
    from tvm.target import codegen

    from .grid import suggest

    try:
        return suggest(name, codegen.llvm_get_cpu_archlist(tvm.target.Target("llvm")))
    except Exception:  # noqa: BLE001 - only a hint
        return ""


def _parameter_named_in(message: str, options: dict[str, Any]) -> str:
    """The grid parameter a TuningOptions error is about (best effort, for the place)."""
    for name, parameter in PARAMETERS.items():
        if parameter.call == "autotune" and parameter.argument and parameter.argument in message:
            return name
    return "trials"


def _place(grid: Grid, name: str, value: Any) -> str:
    """Where a parameter's value is written: its axis item, or its fixed entry."""
    if name in grid.axes:
        for i, candidate in enumerate(grid.axes[name]):
            if candidate == value:
                return grid.where("grid", name, i)
        return grid.where("grid", name)
    return grid.where("fixed", name)


def _looks_like_path(model: str) -> bool:
    from simpletvm.models.zoo import canonical_name

    return not model.startswith(("http://", "https://", "hub:")) and not canonical_name(model)


def _short(value: Any) -> str:
    if isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."
