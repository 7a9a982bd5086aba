"""A load-aware scheduler that interleaves the stages of many autotuning jobs.

It knows nothing of TVM: anything that implements :class:`Job` can be scheduled.
Only light standard-library modules load here; matplotlib and pandas load in the
trace functions that draw or tabulate.
"""

from scheduler.backends import Backend, InProcessBackend, ProcessBackend, RayBackend, get_backend
from scheduler.base import (
    Failure,
    FailureCause,
    Job,
    JobFactory,
    Resource,
    Stage,
    StageResult,
    StageStatus,
)
from scheduler.errors import SchedulerError, WorkerDied
from scheduler.loop import Scheduler
from scheduler.policies import POLICIES, Policy, Start, get_policy
from scheduler.resources import client, device, device_role, devices
from scheduler.state import JobRecord, JobStatus, State
from scheduler.trace import JobOutcome, StageRecord, Trace

__all__ = [
    "POLICIES",
    "Backend",
    "Failure",
    "FailureCause",
    "InProcessBackend",
    "Job",
    "JobFactory",
    "JobOutcome",
    "JobRecord",
    "JobStatus",
    "Policy",
    "ProcessBackend",
    "RayBackend",
    "Resource",
    "Scheduler",
    "SchedulerError",
    "Stage",
    "StageRecord",
    "StageResult",
    "StageStatus",
    "Start",
    "State",
    "Trace",
    "WorkerDied",
    "client",
    "device",
    "device_role",
    "devices",
    "get_backend",
    "get_policy",
]
