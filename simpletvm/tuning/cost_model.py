"""Cost-model updates that train only when the training can change a prediction, and
the cost model a store keeps for every job on a target.

MetaSchedule's XGBoost model predicts at random until it holds ``num_warmup_samples``
measurements, yet retrains on every early update (about half a second each on 2 cores). A
cold job's first round, one update per task, spent a third of a short budget on trainings
whose boosters were never asked. Below the warm-up count the measurements are kept and the
training is left for the update that reaches it.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from simpletvm.store import file_lock


def update_cost_model(model: Any, context: Any, candidates: list, results: list) -> None:
    """``model.update(context, candidates, results)``, without training an XGBoost model
    that would still predict at random afterwards."""
    warmup = getattr(model, "num_warmup_samples", None)
    adaptive = getattr(model, "adaptive_training", False)  # the skip below needs it
    if warmup is None or not adaptive or model.data_size + len(candidates) >= warmup:
        model.update(context, candidates, results)
        return
    last_train_size = model.last_train_size
    # XGBModel's adaptive training skips a retraining while the data grew by less than a
    # fifth since the last one: an unreachable last size keeps it from training now
    model.last_train_size = sys.maxsize
    try:
        model.update(context, candidates, results)
    finally:
        model.last_train_size = last_train_size


# ---- the store's cost model ----------------------------------------------------------
# One XGBoost model per target in the store: its measurements (features and latencies,
# grouped by workload) and the booster trained on them. A job most of whose workloads it
# has measured starts from it, so the search is guided from its first select instead of
# sampling at random. Any other job starts cold: one trained on
# another model's workloads ranked them no better than sampling does, and evolving on
# its predictions costs more per select (BENCHMARKS.md, "time to the peers", warm).

STORE_SAMPLES = 20_000  # the most a store's model keeps: the newest workloads' first


def new_xgb_model() -> Any:
    """MetaSchedule's XGBoost cost model as every job uses it."""
    from tvm.s_tir import meta_schedule as ms

    return ms.cost_model.XGBModel(
        extractor=ms.feature_extractor.PerStoreFeature(), adaptive_training=True
    )


def load_store_cost_model(model: Any, path: Path, log: logging.Logger | None = None) -> int:
    """Load the store's model at ``path`` into the XGBoost ``model``; returns how many
    measurements it holds (0: none there, or unreadable, which is logged and skipped:
    the job then starts cold as it would on a new store)."""
    if not path.exists():
        return 0
    try:
        with file_lock(path), _xgboost_file_warning_off():
            model.load(str(path))
    except Exception as error:  # noqa: BLE001 - a damaged file costs warmth, not the job
        if log is not None:
            log.warning("the store's cost model %s is unreadable, starting cold: %s", path, error)
        model.data, model.data_size, model.booster = OrderedDict(), 0, None
        return 0
    return model.data_size


def save_store_cost_model(model: Any, path: Path) -> None:
    """Merge what ``model`` measured into the store's model at ``path``.

    Jobs that ran at the same time each started from the file and add to it when they
    end: per workload the larger set of measurements is kept (a job's set holds the
    file's as it was when the job started, plus its own), workloads only the file holds
    stay, and the oldest workloads go first beyond :data:`STORE_SAMPLES`. The booster
    saved is the job's; the next job trains on the merged data at its first update."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    if model.booster is None:  # never trained: below the warm-up count, nothing to give
        return
    with file_lock(path), _xgboost_file_warning_off():
        merged = XGBModel()
        if path.exists():
            try:
                merged.load(str(path))
            except Exception:  # noqa: BLE001 - replaced by this job's model below
                merged.data = OrderedDict()
        groups = OrderedDict(merged.data)
        for key, group in model.data.items():
            if key not in groups or len(group.costs) >= len(groups[key].costs):
                groups.pop(key, None)
                groups[key] = group  # the newest last
        size = sum(len(g.costs) for g in groups.values())
        while size > STORE_SAMPLES and len(groups) > 1:
            size -= len(groups.popitem(last=False)[1].costs)
        merged.data, merged.booster, merged.data_size = groups, model.booster, size
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        merged.save(str(partial))
        os.replace(partial, path)  # readers never see half a file


@contextmanager
def _xgboost_file_warning_off() -> Iterator[None]:
    """MetaSchedule names its booster file ``model.bin``, whose extension XGBoost warns
    about on every save and load before it picks the format right."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=".*(Unknown file format|Saving model in the UBJSON)",
            category=UserWarning,
        )
        yield


class JobCostModel:
    """The cost model every task's search of one job shares: XGBoost (``kind="xgb"``) or
    random. Given the store's file (``store_file``), the store's model is read when the
    first task starts (a job answered from the store never reads it) and the job's
    measurements join it when the job ends."""

    def __init__(self, kind: str, store_file: Path | None = None) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.model = new_xgb_model() if kind == "xgb" else ms.cost_model.RandomModel()
        self.store_file = store_file
        self.held: int | None = None  # measurements the store's model held; None: not read

    def read_store(self, workloads: list, log: logging.Logger | None) -> None:
        """Take the store's cost model when it has measured at least half of the job's
        ``workloads`` (this model tuned before, or one sharing most layers with it: a
        softmax that every classifier has is not enough); otherwise start cold. Once per
        job; nothing without a file."""
        from tvm.s_tir.meta_schedule.utils import shash2hex

        if self.store_file is None or self.held is not None:
            return
        stored = new_xgb_model()
        held = load_store_cost_model(stored, self.store_file, log)
        mine = [shash2hex(workload) for workload in workloads]  # as the model groups them
        if held and 2 * sum(key in stored.data for key in mine) >= len(mine):
            self.model, self.held = stored, held
        else:
            self.held = 0

    def is_cold(self) -> bool:
        """Whether the model still predicts at random (XGBoost before it has its warm-up
        samples): then evolving a population buys nothing."""
        warmup = getattr(self.model, "num_warmup_samples", None)
        return warmup is not None and self.model.data_size < warmup

    def warm(self, context: Any, records: list) -> None:
        """Train on the tuning ``records`` of the ``context``'s workload, unless the
        model holds the workload's measurements already (the store's did)."""
        from tvm.s_tir.meta_schedule.runner import RunnerResult
        from tvm.s_tir.meta_schedule.utils import shash2hex

        if shash2hex(context.mod) not in getattr(self.model, "data", {}):
            self.update(
                context,
                [r.as_measure_candidate() for r in records],
                [RunnerResult(list(r.run_secs), None) for r in records],
            )

    def update(self, context: Any, candidates: list, results: list) -> None:
        update_cost_model(self.model, context, candidates, results)

    def save(self) -> None:
        """Add what the job measured to the store's model, if it read it and measured."""
        if self.held is not None and self.model.data_size > self.held:
            save_store_cost_model(self.model, self.store_file)
