"""Autotuning parameters (thesis ch. 3.2) with defaults a newcomer can keep."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from simpletvm.tuning.tasks import TASK_SCHEDULERS
from simpletvm.tuning.timing import cache_mode

DEFAULT_TRIALS = 64  # per task, when nothing else bounds the job
UNCAPPED_TRIALS = 1_000_000  # per task, when total_trials or minutes bound the job
SEARCH_STRATEGIES = ("evolutionary", "replay-trace", "replay-func")
COST_MODELS = ("xgb", "random")


@dataclass
class TuningOptions:
    """What ``SimpleTVM.autotune()`` takes.

    trials: measured candidates per task, at most (the thesis' "number of trials");
    None: 64, or no cap when ``total_trials`` or ``minutes`` bound the job, which then
    spends its budget where the gradient task order sends it.
    total_trials: optional cap over all tasks of the model.
    timeout: profiling timeout per candidate in seconds (None: 20 s CPU, 5 s GPU).
    candidates_per_iteration: candidates selected, built and profiled per iteration
    (``batch_size`` is accepted for it where options come as a mapping or keywords).
    transfer_learning: seed each task's search and cost model from the global database.
    early_stopping: stop a task after this many trials without improvement (None: off).
    task_scheduler: which task each iteration goes to: "gradient" measures every task
    once, then the one whose weighted latency is expected to fall most; "sequential"
    tunes the tasks one after another.
    search_strategy / cost_model: MetaSchedule's; population, genetic_iterations and
    eps_greedy set how much the select stage costs (the evolutionary search's first
    selects draw from the design space while XGBoost still predicts at random).
    number / repeat / min_repeat_ms / cache_flush: how a candidate is timed. On CPUs
    the caches are set before each run (one run per measurement) as a layer inside the
    model finds them: its activations just written, and as many bytes passed through the
    caches as one run of the model keeps there (``"model"``, what ``"auto"`` takes
    locally); ``"l3"``
    and ``"memory"`` push out the private caches or all of them, ``"off"`` times hot
    (:mod:`simpletvm.tuning.timing`).
    remeasure: when the search is over, each task's best this many records are timed
    again and keep the new latency, so the build and the estimate rest on timings that
    were not picked for being lucky (0: off; a ``minutes`` budget keeps the time it is
    expected to take, at most a tenth).
    """

    trials: int | None = None
    total_trials: int | None = None
    minutes: float | None = None
    timeout: float | None = None
    candidates_per_iteration: int = 16
    transfer_learning: bool = True
    early_stopping: int | None = None
    task_scheduler: str = "gradient"
    search_strategy: str = "evolutionary"
    cost_model: str = "xgb"
    seed: int | None = None
    # 64 and 1: a select stage a third of the work of 128 and 2 (MetaSchedule samples and
    # mutates population x (1 + iterations) candidates). On a small host select otherwise
    # takes most of a short tuning, and the trials the cheaper select leaves time for
    # lower the estimate more than a larger population's picks do (BENCHMARKS.md)
    population: int = 64
    genetic_iterations: int = 1
    eps_greedy: float = 0.05
    build_timeout: float = 60.0
    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 0
    cache_flush: str = "auto"
    # 2: the estimate rests on each task's best records timed again, not on the luckiest
    # of many timings, and the round's choice runs as fast as the search's
    # (bench/closing_round.py, BENCHMARKS.md)
    remeasure: int = 2
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
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
        if self.candidates_per_iteration is None:  # what grids say for "default"
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
        return cls(**renamed(values))


# names still accepted for options that were renamed so that one concept has one name:
# "batch_size" is the model's batch everywhere else (``from_model(batch_size=)``)
OLD_NAMES = {"batch_size": "candidates_per_iteration"}


def renamed(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with old option names replaced by the current ones."""
    return {OLD_NAMES.get(name, name): value for name, value in values.items()}
