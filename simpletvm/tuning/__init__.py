"""Autotuning as schedulable stages: options, the job, its builder and the record store."""

from .curve import tuning_curve
from .job import TuningJob
from .options import TuningOptions
from .plan import STAGES, StageSpec
from .records import RecordStore

__all__ = ["STAGES", "RecordStore", "StageSpec", "TuningJob", "TuningOptions", "tuning_curve"]
