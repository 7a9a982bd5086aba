"""Autotuning as schedulable stages: options, the job, its builder and the record store."""

from .curve import tuning_curve
from .job import STAGES, StageSpec, TuningJob
from .options import TuningOptions
from .records import RecordStore

__all__ = ["STAGES", "RecordStore", "StageSpec", "TuningJob", "TuningOptions", "tuning_curve"]
