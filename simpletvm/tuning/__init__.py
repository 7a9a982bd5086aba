"""Autotuning as schedulable stages: options, the job, its builder and the record store.

The names below load on first use, so that the options (:mod:`simpletvm.tuning.options`)
are read without TVM: superb's grid parameters are made from them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simpletvm.tuning.curve import tuning_curve
    from simpletvm.tuning.job import TuningJob
    from simpletvm.tuning.options import TuningOptions
    from simpletvm.tuning.plan import STAGES, StageSpec
    from simpletvm.tuning.records import RecordStore

_HOMES = {
    "STAGES": "simpletvm.tuning.plan",
    "RecordStore": "simpletvm.tuning.records",
    "StageSpec": "simpletvm.tuning.plan",
    "TuningJob": "simpletvm.tuning.job",
    "TuningOptions": "simpletvm.tuning.options",
    "tuning_curve": "simpletvm.tuning.curve",
}
__all__ = ["STAGES", "RecordStore", "StageSpec", "TuningJob", "TuningOptions", "tuning_curve"]


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'simpletvm.tuning' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
