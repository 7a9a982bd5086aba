"""What a grid can set: every parameter, the SimpleTVM call it goes to, and its type.

The tuning options are :class:`~simpletvm.tuning.options.TuningOptions`' own (names,
types, defaults and help come from there); the rest are superb's: the context, the
model's import, switches between the calls, the build and the evaluation. Imported when
a grid is read, not by ``superb --help``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simpletvm.cli_options import MIN_MINUTES
from simpletvm.tuning.options import OLD_NAMES, current_name, documented_options

CALLS = ("context", "from_model", "autotune", "build", "save", "evaluate")


@dataclass(frozen=True)
class Parameter:
    """One grid parameter: the SimpleTVM call it goes to, under which keyword."""

    name: str
    call: str
    argument: str | None  # None: a switch of superb's (autotune, save, evaluate)
    kind: str  # int, float, bool, str, bool-or-str, str-list, mapping, target
    nullable: bool
    help: str


def _p(name, call, argument, kind, help, nullable=False):  # noqa: A002 - table helper
    return Parameter(name, call, argument, kind, nullable, help)


# tuning options a grid names otherwise: beside evaluate_number and evaluate_repeat, the
# profiling of candidates says its own
GRID_NAMES = {
    "number": "profile_number",
    "repeat": "profile_repeat",
    "min_repeat_ms": "profile_min_repeat_ms",
}
# a tuning option's types (None aside) -> the kind check_value knows
KINDS = {
    (int,): "int",
    (float,): "float",
    (bool,): "bool",
    (str,): "str",
    (str, bool): "bool-or-str",
}


def _tuning_parameters() -> list[Parameter]:
    """autotune()'s options as TuningOptions documents them."""
    return [
        Parameter(
            GRID_NAMES.get(option.name, option.name),
            "autotune",
            option.name,
            KINDS[option.types],
            option.nullable,
            f"{option.help} (default: {option.default})",
        )
        for option in documented_options()
    ]


PARAMETERS: dict[str, Parameter] = {
    p.name: p
    for p in [
        # BenchmarkingContext(...)
        _p("target", "context", "target", "target", "'cpu', 'cuda' or a TVM target mapping"),
        _p(
            "device_key",
            "context",
            "device_key",
            "str",
            "RPC key of the profiling devices (default: superb-<cpu|cuda>)",
            True,
        ),
        _p("cpu_arch", "context", "cpu_arch", "str", "LLVM CPU name (default: this host's)", True),
        _p(
            "num_threads",
            "context",
            "num_threads",
            "int",
            "threads (default: physical cores; inference on this host: the faster of them and "
            "one, timed at build)",
            True,
        ),
        # from_model(...)
        _p(
            "model",
            "from_model",
            "source",
            "str",
            "built-in name or model file/directory (relative to the grid file)",
        ),
        _p("output_name", "from_model", "output_name", "str-list", "GraphDef output node(s)", True),
        _p("output_size", "from_model", "output_size", "int", "checked output length", True),
        _p(
            "input_shapes",
            "from_model",
            "input_shapes",
            "mapping",
            "{input: shape} for unknown dimensions",
            True,
        ),
        _p("model_batch_size", "from_model", "batch_size", "int", "the model's input batch"),
        _p("format", "from_model", "format", "str", "force an importer (onnx, tflite, ...)", True),
        _p("signature", "from_model", "signature", "str", "SavedModel / TF Hub signature"),
        _p("image_size", "from_model", "image_size", "int", "built-in models: input size"),
        _p("classes", "from_model", "classes", "int", "built-in models: output classes"),
        _p("alpha", "from_model", "alpha", "float", "built-in MobileNets: width multiplier"),
        _p("model_seed", "from_model", "seed", "int", "built-in models: weight seed"),
        # autotune(...)
        _p("autotune", "autotune", None, "bool", "tune before building (default true)"),
        *_tuning_parameters(),
        _p(
            "in_model",
            "autotune",
            None,
            "bool",
            "time the tuned kernels inside the model after the search (default: when the "
            "budget or the search is a minute or more and the devices are this machine's)",
            True,
        ),
        # build(...), save(), evaluate(...)
        _p(
            "records",
            "build",
            "records",
            "str",
            "global, best, run or a run id (default: run when tuned, none otherwise)",
            True,
        ),
        _p("save", "save", None, "bool", "save the built module (default false)"),
        _p("evaluate", "evaluate", None, "bool", "measure the built module (default true)"),
        _p("evaluate_repeat", "evaluate", "repeat", "int", "timed inferences"),
        _p("evaluate_warmup", "evaluate", "warmup", "int", "untimed inferences first"),
        _p("evaluate_number", "evaluate", "number", "int", "inferences per timed sample"),
        _p("evaluate_seed", "evaluate", "seed", "int", "seed of the random inputs"),
        _p(
            "evaluate_tolerance",
            "evaluate",
            "tolerance",
            "float",
            "largest relative error against the source framework (default by dtype)",
            True,
        ),
    ]
}


def current_parameter(name: str, where: str) -> str:
    """The parameter ``name`` stands for: itself, or for an old tuning option's name the
    current one, with a warning naming it at ``where``."""
    if name not in OLD_NAMES:
        return name
    option = current_name(name, where, stacklevel=2)
    return GRID_NAMES.get(option, option)


def check_value(parameter: Parameter, value: Any) -> str | None:
    """Why ``value`` does not fit ``parameter``, or None when it does."""
    if value is None:
        return None if parameter.nullable else "must not be null"
    kind = parameter.kind
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "bool-or-str": isinstance(value, (bool, str)),
        "str-list": isinstance(value, str)
        or (isinstance(value, list) and all(isinstance(v, str) for v in value)),
        "mapping": isinstance(value, dict),
        "target": isinstance(value, (str, dict)),
    }[kind]
    if ok and parameter.name == "minutes" and value < MIN_MINUTES:
        return f"must be at least {MIN_MINUTES} (as simpletvm's --minutes), got {value!r}"
    if ok:
        return None
    wanted = {
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "str": "a string",
        "bool-or-str": "true, false or a string",
        "str-list": "a string or a list of strings",
        "mapping": "a mapping",
        "target": "a string or a TVM target mapping",
    }[kind]
    return f"must be {wanted}, got {value!r}"


def calls_for(params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of each SimpleTVM call for one run's parameters.

    ``autotune`` and ``evaluate`` are None when the run skips them; ``save`` is a bool.
    """
    calls: dict[str, Any] = {call: {} for call in CALLS}
    for name, value in params.items():
        parameter = PARAMETERS[name]
        if parameter.argument is not None:
            calls[parameter.call][parameter.argument] = value
    tuned = params.get("autotune", True)
    if not tuned:
        calls["autotune"] = None
    calls["build"].setdefault("records", "run" if tuned else None)
    if calls["build"]["records"] in ("none", "None", ""):
        calls["build"]["records"] = None
    calls["save"] = bool(params.get("save", False))
    if not params.get("evaluate", True):
        calls["evaluate"] = None
    calls["context"].setdefault("target", "cpu")
    return calls
