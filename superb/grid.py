"""Grid files: what to sweep, read from YAML with the line of every value kept.

A grid names values per parameter; its runs are the n-ary product of the axes, with
``fixed`` values shared by every run, ``zip`` groups of axes that advance together, and
``exclude`` patterns that drop combinations::

    name: mobilenet-trials
    fixed: {target: cpu, evaluate_repeat: 30}
    grid:
      model: [mobilenetv2, resnet18]
      image_size: [96, 64]
      trials: [8, 16]
    zip: [[model, image_size]]
    exclude: [{model: resnet18, trials: 16}]
    repetitions: 1

Every parameter goes to one SimpleTVM call (see :mod:`superb.parameters`, imported when
a grid is read, not by ``superb --help``); unknown names, wrong types, empty axes and
broken zip/exclude entries are reported with file and line before anything runs. An old
tuning option's name is read as the current one, with a warning. Nothing here imports TVM.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import SuperbError

TOP_LEVEL_KEYS = ("name", "description", "fixed", "grid", "zip", "exclude", "repetitions")


def suggest(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for a close match, else ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ---- errors with places --------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    message: str
    where: str = ""  # "grid.yaml:12" or "--param trials"

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class GridError(SuperbError):
    """The grid cannot run; ``problems`` says every reason found, each with its place."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=_file_order)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __reduce__(self):
        """Pickle the problems, not the message ``args`` holds."""
        return type(self), (self.problems,)


def peer_problem(peers: Any) -> str | None:
    """Why ``peers`` (a grid's, or --peers') is no list of peer names, or None."""
    from simpletvm.runtime.peers import PEERS, unknown_peers

    if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
        return f"peers must be a list of names, e.g. [tflite, onnxruntime]: got {peers!r}"
    if unknown := unknown_peers(peers):
        return f"unknown peer(s) {', '.join(unknown)}: the peers are {', '.join(PEERS)}"
    return None


def _file_order(problem: Problem) -> tuple[str, int]:
    """Problems in the order of their lines in the file."""
    name, _, line = problem.where.partition(":")
    number = line.split(":")[0]
    return name, int(number) if number.isdigit() else 0


# ---- the grid ------------------------------------------------------------------------


@dataclass
class Grid:
    """A parsed grid file. ``places`` maps paths like ("grid", "trials", 1) to lines."""

    name: str
    path: Path | None = None
    description: str = ""
    fixed: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list] = field(default_factory=dict)
    zip: list[list[str]] = field(default_factory=list)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    repetitions: int = 1
    places: dict[tuple, str] = field(default_factory=dict)
    peers: list[str] = field(default_factory=list)  # fixed's `peers`: no run parameter

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def where(self, *path: Any) -> str:
        """The place of a value, or of its closest enclosing one."""
        while path:
            if path in self.places:
                return self.places[path]
            path = path[:-1]
        return str(self.path) if self.path else ""

    @property
    def parameter_names(self) -> list[str]:
        """Every parameter the grid sets: axes first (in order), then fixed ones."""
        return list(self.axes) + [n for n in self.fixed if n not in self.axes]

    def with_overrides(self, overrides: list[tuple[str, list]]) -> Grid:
        """Add or replace axes from the command line (``--param name=v1,v2``)."""
        fixed, axes, places = dict(self.fixed), dict(self.axes), dict(self.places)
        zipped = {name for group in self.zip for name in group}
        for name, values in overrides:
            place = f"--param {name}"
            if name in axes or (len(values) > 1 or name in zipped):
                fixed.pop(name, None)
                axes[name] = list(values)
                places[("grid", name)] = place
                for i in range(len(values)):
                    places[("grid", name, i)] = place
            else:
                fixed[name] = values[0]
                places[("fixed", name)] = place
        return replace(self, fixed=fixed, axes=axes, places=places)

    def validate(self) -> None:
        """Raise GridError listing every problem of names, types, axes, zip and exclude."""
        from .parameters import PARAMETERS, check_value

        problems: list[Problem] = []
        known = list(PARAMETERS)
        for section, names in (("fixed", self.fixed), ("grid", self.axes)):
            for name in names:
                if name not in PARAMETERS:
                    problems.append(
                        Problem(
                            f"unknown parameter {name!r}{suggest(name, known)}; known parameters: "
                            f"{', '.join(known)}",
                            self.where(section, name),
                        )
                    )
        both = [n for n in self.axes if n in self.fixed]
        for name in both:
            problems.append(
                Problem(
                    f"parameter {name!r} is both fixed and an axis: keep one",
                    self.where("grid", name),
                )
            )
        for name, value in self.fixed.items():
            if name in PARAMETERS and (why := check_value(PARAMETERS[name], value)):
                problems.append(Problem(f"{name} {why}", self.where("fixed", name)))
        for name, values in self.axes.items():
            if not values:
                problems.append(
                    Problem(
                        f"axis {name!r} is empty: give it at least one value",
                        self.where("grid", name),
                    )
                )
                continue
            for i, value in enumerate(values):
                if name in PARAMETERS and (why := check_value(PARAMETERS[name], value)):
                    problems.append(Problem(f"{name} {why}", self.where("grid", name, i)))
        if "model" not in self.fixed and "model" not in self.axes:
            problems.append(Problem("no model: set 'model' under fixed or grid", self.where()))
        problems += self._zip_problems() + self._exclude_problems()
        if self.repetitions < 1:
            problems.append(Problem("repetitions must be at least 1", self.where("repetitions")))
        if why := peer_problem(self.peers):
            problems.append(Problem(why, self.where("fixed", "peers")))
        if problems:
            raise GridError(problems)

    def _zip_problems(self) -> list[Problem]:
        problems, seen = [], set()
        for g, group in enumerate(self.zip):
            place = self.where("zip", g)
            for name in group:
                if name not in self.axes:
                    problems.append(
                        Problem(
                            f"zip names {name!r}, which is not an axis under grid"
                            f"{suggest(name, self.axes)}",
                            place,
                        )
                    )
                elif name in seen:
                    problems.append(Problem(f"axis {name!r} is in two zip groups", place))
                seen.add(name)
            lengths = {name: len(self.axes[name]) for name in group if name in self.axes}
            if len(set(lengths.values())) > 1:
                problems.append(
                    Problem(
                        "zipped axes need the same number of values, got "
                        + ", ".join(f"{n}: {k}" for n, k in lengths.items()),
                        place,
                    )
                )
        return problems

    def _exclude_problems(self) -> list[Problem]:
        problems = []
        for e, pattern in enumerate(self.exclude):
            for name in pattern:
                if name not in self.axes and name not in self.fixed:
                    problems.append(
                        Problem(
                            f"exclude names {name!r}, which the grid does not set"
                            f"{suggest(name, self.parameter_names)}",
                            self.where("exclude", e),
                        )
                    )
        return problems

    def expand(self) -> tuple[list[dict[str, Any]], list[int]]:
        """Every combination (fixed values included), in order, and how many runs each
        exclude pattern removed. Repetitions are not expanded here."""
        names = list(self.axes)
        groups: list[list[str]] = []  # zip groups take the place of their first axis
        zipped = {name: group for group in self.zip for name in group}
        for name in names:
            group = zipped.get(name, [name])
            if group not in groups:
                groups.append(group)
        choices = [list(zip(*(self.axes[n] for n in group))) for group in groups]
        combos, removed = [], [0] * len(self.exclude)
        for picked in itertools.product(*choices):
            values: dict[str, Any] = {}
            for group, row in zip(groups, picked):
                values.update(zip(group, row))
            params = {n: values[n] for n in names}
            params.update({n: v for n, v in self.fixed.items() if n not in params})
            hits = [i for i, pattern in enumerate(self.exclude) if _matches(pattern, params)]
            for i in hits:
                removed[i] += 1
            if not hits:
                combos.append(params)
        return combos, removed


def _matches(pattern: dict[str, Any], params: dict[str, Any]) -> bool:
    """A pattern value matches equal values; a list in a pattern matches any element."""
    for name, wanted in pattern.items():
        value = params.get(name)
        if value == wanted:
            continue
        if isinstance(wanted, list) and value in wanted:
            continue
        return False
    return True


# ---- reading files -------------------------------------------------------------------


def parse_override(text: str) -> tuple[str, list]:
    """``name=v1,v2`` -> (name, [v1, v2]); values are read as YAML scalars (8, true, null)."""
    from .parameters import PARAMETERS, current_parameter

    name, sep, rest = text.partition("=")
    where = f"--param {text}"
    if not sep or not name.strip():
        raise GridError([Problem("expected name=value1,value2", where)])
    name = current_parameter(name.strip(), where)
    if name not in PARAMETERS:
        raise GridError(
            [
                Problem(
                    f"unknown parameter {name!r}{suggest(name, PARAMETERS)}; "
                    f"known parameters: {', '.join(PARAMETERS)}",
                    where,
                )
            ]
        )
    items = [item.strip() for item in rest.split(",")] if rest.strip() else []
    if not items or any(item == "" for item in items):
        raise GridError([Problem(f"axis {name!r} has an empty value", where)])
    try:
        return name, [yaml.safe_load(item) for item in items]
    except yaml.YAMLError as error:
        raise GridError([Problem(f"cannot read a value: {error}", where)]) from error


def load_grid(path: str | Path) -> Grid:
    """Read and validate a grid file; GridError names file and line of every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise GridError(
            [Problem(f"cannot read the grid file: {error.strerror}", str(path))]
        ) from error
    return parse_grid(text, path)


def parse_grid(text: str, path: Path | None = None, validate: bool = True) -> Grid:
    source = str(path) if path else "<grid>"
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        reason = " ".join(str(x) for x in (error.context, error.problem) if x)
        raise GridError([Problem(f"malformed YAML: {reason}", where)]) from error
    except yaml.YAMLError as error:
        raise GridError([Problem(f"malformed YAML: {error}", source)]) from error
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise GridError(
            [
                Problem(
                    "a grid file is a mapping with 'grid:' (and optionally "
                    "'name', 'fixed', 'zip', 'exclude', 'repetitions')",
                    source,
                )
            ]
        )
    places: dict[tuple, str] = {}
    duplicates: list[Problem] = []
    _index(node, (), source, places, duplicates)
    problems = list(duplicates)
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            problems.append(
                Problem(
                    f"unknown key {key!r}{suggest(str(key), TOP_LEVEL_KEYS)}; "
                    f"a grid file has {', '.join(TOP_LEVEL_KEYS)}",
                    places.get((key,), source),
                )
            )

    def section(key, kind, default):
        value = data.get(key)
        if value is None:
            return default
        if not isinstance(value, kind):
            problems.append(
                Problem(
                    f"'{key}' must be a {kind.__name__.replace('dict', 'mapping')}",
                    places.get((key,), source),
                )
            )
            return default
        return value

    fixed = dict(section("fixed", dict, {}))
    peers = fixed.pop("peers", None) or []
    axes = section("grid", dict, {})
    zips = section("zip", list, [])
    exclude = section("exclude", list, [])
    repetitions = data.get("repetitions", 1)
    if "grid" not in data and "fixed" not in data:
        problems.append(
            Problem(
                "no 'grid:' section: list values per parameter, e.g. grid: {trials: [8, 16]}",
                source,
            )
        )
    axes = {
        name: (values if isinstance(values, list) else [values]) for name, values in axes.items()
    }
    for g, group in enumerate(zips):
        if not (isinstance(group, list) and all(isinstance(n, str) for n in group)):
            problems.append(
                Problem(
                    "each zip entry is a list of axis names, e.g. [model, image_size]",
                    places.get(("zip", g), source),
                )
            )
    zips = [g for g in zips if isinstance(g, list) and all(isinstance(n, str) for n in g)]
    for e, pattern in enumerate(exclude):
        if not isinstance(pattern, dict) or not pattern:
            problems.append(
                Problem(
                    "each exclude entry is a mapping of parameter values, "
                    "e.g. {model: resnet18, trials: 16}",
                    places.get(("exclude", e), source),
                )
            )
    exclude = [p for p in exclude if isinstance(p, dict) and p]
    if not isinstance(repetitions, int) or isinstance(repetitions, bool):
        problems.append(
            Problem("repetitions must be an integer", places.get(("repetitions",), source))
        )
        repetitions = 1
    name = data.get("name") or (path.stem if path else "grid")
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        problems.append(
            Problem("name must be a plain directory name", places.get(("name",), source))
        )
        name = path.stem if path else "grid"
    grid = Grid(
        name=name,
        path=path,
        description=str(data.get("description") or ""),
        fixed=fixed,
        axes=axes,
        zip=zips,
        exclude=exclude,
        repetitions=repetitions,
        places=places,
        peers=peers,
    )
    grid, renaming = _with_current_names(grid)
    problems += renaming
    if problems:
        raise GridError(problems)
    if validate:
        grid.validate()
    return grid


def _with_current_names(grid: Grid) -> tuple[Grid, list[Problem]]:
    """``grid`` with old parameter names (an old tuning option's) read as the current
    ones, with a warning where each is set; a grid setting both names has a problem."""
    from .parameters import current_parameter

    names, problems = {}, []
    for section, values in (("fixed", grid.fixed), ("grid", grid.axes)):
        for name in values:
            new = current_parameter(name, grid.where(section, name))
            if new in values and new != name:
                problems.append(
                    Problem(f"{name!r} is the old name of {new!r}: keep one", grid.where(section))
                )
            names[name] = new
    if problems or all(old == new for old, new in names.items()):
        return grid, problems

    def current(mapping: dict[str, Any]) -> dict[str, Any]:
        return {names.get(name, name): value for name, value in mapping.items()}

    renamed = replace(
        grid,
        fixed=current(grid.fixed),
        axes=current(grid.axes),
        zip=[[names.get(name, name) for name in group] for group in grid.zip],
        exclude=[current(pattern) for pattern in grid.exclude],
        places={tuple(names.get(p, p) for p in path): at for path, at in grid.places.items()},
    )
    return renamed, problems


def _index(node, path: tuple, source: str, places: dict, duplicates: list) -> None:
    """Record ``file:line`` for every mapping key and sequence item under ``node``."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            key = key_node.value
            place = f"{source}:{key_node.start_mark.line + 1}"
            if key in seen:
                duplicates.append(Problem(f"{key!r} appears twice in the same mapping", place))
            seen.add(key)
            places[path + (key,)] = place
            _index(value_node, path + (key,), source, places, duplicates)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            places[path + (i,)] = f"{source}:{item.start_mark.line + 1}"
            _index(item, path + (i,), source, places, duplicates)
