"""Backends that execute stages, by name or as objects."""

from __future__ import annotations

from scheduler.backends.base import Backend, StageOutcome
from scheduler.backends.inprocess import InProcessBackend
from scheduler.backends.processes import ProcessBackend

BACKENDS: dict[str, type[Backend]] = {cls.name: cls for cls in (InProcessBackend, ProcessBackend)}


def get_backend(backend: Backend | str) -> Backend:
    """A backend object as given, or a fresh one for a registered name."""
    if isinstance(backend, Backend):
        return backend
    try:
        return BACKENDS[backend]()
    except KeyError:
        raise ValueError(
            f"unknown backend {backend!r}; valid names: {', '.join(sorted(BACKENDS))}"
        ) from None


__all__ = ["BACKENDS", "Backend", "InProcessBackend", "ProcessBackend", "StageOutcome", "get_backend"]
