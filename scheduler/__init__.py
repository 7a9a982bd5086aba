"""A load-aware scheduler that interleaves the stages of many autotuning jobs.

It knows nothing of TVM: anything that implements :class:`Job` can be scheduled.
Only light standard-library modules load here; matplotlib and pandas load in the
trace functions that draw or tabulate.
"""

from scheduler.backends import Backend, InProcessBackend, ProcessBackend, RayBackend, get_backend
from scheduler.base import Job, JobFactory, Resource, Stage, StageResult, StageStatus
from scheduler.loop import Scheduler
from scheduler.policies import POLICIES, Policy, Start, get_policy
from scheduler.resources import client, device, device_role, devices
from scheduler.state import JobRecord, JobStatus, State
from scheduler.trace import FailureCause, JobOutcome, StageRecord, Trace

__all__ = [
    "POLICIES",
    "Backend",
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
    "Stage",
    "StageRecord",
    "StageResult",
    "StageStatus",
    "Start",
    "State",
    "Trace",
    "client",
    "device",
    "device_role",
    "devices",
    "get_backend",
    "get_policy",
]
