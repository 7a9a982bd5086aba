"""Tuning as a service: many users submit models to one running service that shares the
devices and the store's records (thesis section 4.3).

A FastAPI application (:mod:`service.app`) owns the store, the RPC tracker and servers of
its devices (:mod:`service.infra`) and one scheduler loop running in a thread
(:mod:`service.runner`), into which jobs arrive live. Jobs live in SQLite
(:mod:`service.db`), so a service killed and started again resumes them under their run
ids. It uses simpletvm and the scheduler; nothing imports it.
"""
