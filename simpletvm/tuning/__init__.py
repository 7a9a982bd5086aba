"""Autotuning as schedulable stages: options, the job, its builder and the record store."""

from simpletvm.tuning.curve import tuning_curve
from simpletvm.tuning.job import TuningJob
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.plan import STAGES, StageSpec
from simpletvm.tuning.records import RecordStore

__all__ = ["STAGES", "RecordStore", "StageSpec", "TuningJob", "TuningOptions", "tuning_curve"]
