"""Autotuning parameters (thesis ch. 3.2) with defaults a newcomer can keep.

Each option says what it does in its field's ``help``, the one place it is written:
superb's grid parameters (:func:`documented_options`) and the README's table
(:func:`markdown_table`) are made from it.
"""

from __future__ import annotations

import typing
import warnings
from dataclasses import InitVar, asdict, dataclass, field, fields
from typing import Any

from simpletvm.tuning.tasks import TASK_SCHEDULERS
from simpletvm.tuning.timing import cache_mode

DEFAULT_TRIALS = 64  # per task, when nothing else bounds the job
UNCAPPED_TRIALS = 1_000_000  # per task, when total_trials or minutes bound the job
SEARCH_STRATEGIES = ("evolutionary", "replay-trace", "replay-func")
COST_MODELS = ("xgb", "random")

# names still read (with a FutureWarning) for options renamed so that one concept has one
# name: "batch_size" is the model's batch everywhere else (``from_model(batch_size=)``)
OLD_NAMES = {"batch_size": "candidates_per_iteration"}


def option(default: Any, meaning: str, *, shown: str | None = None, common: bool = False):
    """A field of :class:`TuningOptions` with what the tables say of it: its ``meaning``,
    its default as a reader reads it when the value alone does not say it (``shown``), and
    whether the README lists it (``common``: what a newcomer sets)."""
    return field(default=default, metadata={"help": meaning, "shown": shown, "common": common})


@dataclass
class TuningOptions:
    """What ``SimpleTVM.autotune()`` takes; each field's ``help`` says what it does."""

    # None: 64, or no cap when total_trials or minutes bound the job, which then spends
    # its budget where the gradient task order sends it
    trials: int | None = option(
        None,
        "measured candidates per task, at most",
        shown="64; no cap with minutes or total_trials",
        common=True,
    )
    total_trials: int | None = option(
        None, "cap over all tasks; every task is measured at least once", common=True
    )
    minutes: float | None = option(
        None,
        "wall-clock budget of autotune() from its call, the round inside the model "
        "included; tasks not yet measured when it ends still get 2 trials each",
        common=True,
    )
    timeout: float | None = option(
        None, "profiling timeout per candidate (s)", shown="20 on CPU, 5 on GPU"
    )
    # None (autotune()'s default, a grid's null): 16
    candidates_per_iteration: int | None = option(
        16, "candidates selected, built and profiled per iteration", common=True
    )
    transfer_learning: bool = option(
        True,
        "start from the store's records and, for a model tuned again, its cost model",
        common=True,
    )
    early_stopping: int | None = option(
        None, "stop a task after this many trials without improvement", shown="off"
    )
    task_scheduler: str = option(
        "gradient",
        "which task each iteration goes to: gradient (every task once, then the one whose "
        "weighted latency is expected to fall most) or sequential (one after another)",
    )
    # population, genetic_iterations and eps_greedy set how much the select stage costs
    # (the evolutionary search's first selects draw from the design space while XGBoost
    # still predicts at random)
    search_strategy: str = option(
        "evolutionary", "MetaSchedule's search: evolutionary, replay-trace or replay-func"
    )
    cost_model: str = option("xgb", "MetaSchedule's cost model: xgb or random")
    seed: int | None = option(None, "search seed", common=True)
    # 64 and 1: a select stage a third of the work of 128 and 2 (MetaSchedule samples and
    # mutates population x (1 + iterations) candidates). On a small host select otherwise
    # takes most of a short tuning, and the trials the cheaper select leaves time for
    # lower the estimate more than a larger population's picks do (BENCHMARKS.md)
    population: int = option(64, "evolutionary search: candidates sampled per select")
    genetic_iterations: int = option(1, "evolutionary search: rounds of mutation per select")
    eps_greedy: float = option(0.05, "share of each iteration's candidates picked at random")
    build_timeout: float = option(60.0, "candidate build timeout (s)")
    number: int = option(1, "profiling: runs per measurement")
    repeat: int = option(5, "profiling: measurements per candidate")
    min_repeat_ms: int = option(0, "profiling: minimum time per measurement (ms)")
    # On CPUs the caches are set before each run (one run per measurement) as a layer
    # inside the model finds them: its activations just written, and as many bytes passed
    # through the caches as one run of the model keeps there ("model", what "auto" takes
    # locally); "l3" and "memory" push out the private caches or all of them, "off" times
    # hot (:mod:`simpletvm.tuning.timing`). True/False: the older on/off switch
    cache_flush: str | bool = option(
        "auto",
        "profiling: what the caches hold before each run: auto, model, l3, memory or off "
        "(true/false: memory/off)",
    )
    # Timed again, the build and the estimate rest on timings that were not picked for
    # being lucky; a minutes budget keeps the time this is expected to take, at most a
    # tenth. 2: the round's choice runs as fast as the search's (bench/archive/closing_round.py,
    # BENCHMARKS.md)
    remeasure: int = option(
        2, "each task's best records timed again when the search is over (0: off)"
    )
    extra: dict[str, Any] = field(default_factory=dict)  # no help: not in the tables
    # the old name of candidates_per_iteration, read with a FutureWarning
    batch_size: InitVar[int | None] = None

    def __post_init__(self, batch_size: int | None) -> None:
        if batch_size is not None:
            current_name("batch_size", stacklevel=3)
            if self.candidates_per_iteration not in (
                None,
                batch_size,
                TuningOptions.candidates_per_iteration,
            ):
                raise ValueError(
                    "batch_size is the old name of candidates_per_iteration: give one of them"
                )
            self.candidates_per_iteration = batch_size
        if self.trials is not None and self.trials < 1:
            raise ValueError(f"trials must be at least 1, got {self.trials}")
        if self.total_trials is not None and self.total_trials < 1:
            raise ValueError(f"total_trials must be at least 1, got {self.total_trials}")
        if self.search_strategy not in SEARCH_STRATEGIES:
            raise ValueError(
                f"unknown search_strategy {self.search_strategy!r}: "
                f"choose one of {list(SEARCH_STRATEGIES)}"
            )
        if self.task_scheduler not in TASK_SCHEDULERS:
            raise ValueError(
                f"unknown task_scheduler {self.task_scheduler!r}: "
                f"choose one of {list(TASK_SCHEDULERS)}"
            )
        if self.cost_model not in COST_MODELS:
            raise ValueError(
                f"unknown cost_model {self.cost_model!r}: choose one of {list(COST_MODELS)}"
            )
        if self.early_stopping is not None and self.early_stopping < 1:
            raise ValueError("early_stopping must be a positive number of trials or None")
        if self.candidates_per_iteration is None:
            self.candidates_per_iteration = TuningOptions.candidates_per_iteration
        if self.candidates_per_iteration < 1:
            raise ValueError(
                f"candidates_per_iteration must be at least 1, got {self.candidates_per_iteration}"
            )
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be positive, got {self.minutes}")
        if self.remeasure < 0:
            raise ValueError(f"remeasure must be 0 (off) or more records, got {self.remeasure}")
        self.cache_flush = cache_mode(self.cache_flush)
        if self.cache_flush != "off" and self.number != 1:
            raise ValueError(
                f"cache_flush {self.cache_flush!r} sets the caches before every "
                f"run, so it needs number=1 (got number={self.number}); use "
                "repeat for more samples, or cache_flush='off'"
            )

    def per_task_trials(self) -> int:
        """The most trials one task may measure."""
        if self.trials is not None:
            return self.trials
        return UNCAPPED_TRIALS if (self.total_trials or self.minutes) else DEFAULT_TRIALS

    def resolved_timeout(self, device_type: str) -> float:
        return (
            self.timeout if self.timeout is not None else (5.0 if device_type == "cuda" else 20.0)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> TuningOptions:
        """Options from keywords as users and stored specs write them, old names included
        (:data:`OLD_NAMES`)."""
        return cls(**values)


def current_name(name: str, where: str = "", stacklevel: int = 1) -> str:
    """The option ``name`` names now: itself, or, for an old name, the new one, with a
    FutureWarning saying so (at ``where``, a grid's file and line, when given)."""
    if name not in OLD_NAMES:
        return name
    new = OLD_NAMES[name]
    warnings.warn(
        f"{where + ': ' if where else ''}{name!r} is the old name of the tuning option "
        f"{new!r}, read as it: write {new!r}",
        FutureWarning,
        stacklevel=stacklevel + 1,
    )
    return new


@dataclass(frozen=True)
class OptionDoc:
    """What the tables say of one option."""

    name: str
    types: tuple[type, ...]  # what a value may be, None aside
    nullable: bool
    default: str  # as a reader reads it
    help: str
    common: bool  # what a newcomer sets: the README lists it


def documented_options() -> list[OptionDoc]:
    """Every option with a ``help``, in the order of :class:`TuningOptions`."""
    hints = typing.get_type_hints(TuningOptions)
    documented = []
    for option_field in fields(TuningOptions):
        if "help" not in option_field.metadata:
            continue
        types = typing.get_args(hints[option_field.name]) or (hints[option_field.name],)
        documented.append(
            OptionDoc(
                name=option_field.name,
                types=tuple(t for t in types if t is not type(None)),
                nullable=type(None) in types,
                default=option_field.metadata["shown"] or _shown(option_field.default),
                help=option_field.metadata["help"],
                common=option_field.metadata["common"],
            )
        )
    return documented


def _shown(default: Any) -> str:
    if default is None:
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


def markdown_table() -> str:
    """The README's table of the options a newcomer sets (a test keeps the two equal)."""
    rows = ["| parameter | default | meaning |", "|---|---|---|"]
    rows += [f"| `{o.name}` | {o.default} | {o.help} |" for o in documented_options() if o.common]
    return "\n".join(rows) + "\n"
