"""Tuning as a service: many users submit models to one running service that shares the
devices and the store's records (thesis section 4.3).

A FastAPI application (:mod:`service.app`) owns the store, the RPC tracker and servers of
its devices (:mod:`simpletvm.remote.local_devices`) and one scheduler loop running in a thread
(:mod:`service.runner`), into which jobs arrive live. Jobs live in SQLite
(:mod:`service.db`), so a service killed and started again resumes them under their run
ids. It uses simpletvm and the scheduler; nothing imports it.
"""

from __future__ import annotations

from simpletvm.extras import require

# the libraries of the service extra, by import name; a plain `pip install .` lacks them
EXTRA_MODULES = ("fastapi", "uvicorn", "httpx", "multipart")


def require_extra() -> None:
    """Raise ImportError naming the extra to install when the service's libraries are
    missing, before any of them is imported."""
    require("service", EXTRA_MODULES, "the tuning service")
