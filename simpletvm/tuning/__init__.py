"""Autotuning as schedulable stages: options, the job, its builder and the record store.

The names below load on first use, so that the options (:mod:`simpletvm.tuning.options`)
are read without TVM: superb's grid parameters are made from them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simpletvm.lazy import lazy_attributes

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


__getattr__ = lazy_attributes("simpletvm.tuning", _HOMES, globals())
