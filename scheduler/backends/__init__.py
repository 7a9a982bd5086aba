"""Backends that execute stages, by name or as objects.

Every backend registers here; the Ray backend's module imports Ray only when one is made.
"""

from __future__ import annotations

from scheduler.backends.base import Backend, StageOutcome
from scheduler.backends.inprocess import InProcessBackend
from scheduler.backends.processes import ProcessBackend
from scheduler.backends.ray import RayBackend
from scheduler.errors import WorkerDied

BACKENDS: dict[str, type[Backend]] = {
    cls.name: cls for cls in (InProcessBackend, ProcessBackend, RayBackend)
}


def get_backend(backend: Backend | str) -> Backend:
    """A backend object as given, or a fresh one for a registered name."""
    if isinstance(backend, Backend):
        return backend
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid names: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[backend]()


__all__ = [
    "BACKENDS",
    "Backend",
    "InProcessBackend",
    "ProcessBackend",
    "RayBackend",
    "StageOutcome",
    "WorkerDied",
    "get_backend",
]
