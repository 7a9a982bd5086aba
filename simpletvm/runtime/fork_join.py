"""The pool the compiled kernels fork their parallel loops onto, and join again.

Every parallel loop of a kernel TVM compiled for the CPU goes through a launcher each
library points to. TVM's own pool waits by yielding to the operating system, a system
call per turn that costs about three times a wait on the pause instruction per parallel
loop, and every kernel of a model of microsecond kernels pays it (the quickstart model
has 55 per call, and runs measurably faster with pause waits: BENCHMARKS.md).
``native/fork_join.c`` is a pool that waits
with the pause instruction; :func:`use_for_loaded_kernels` compiles it once per machine
(into the user's cache directory, with ``cc`` or ``$CC``) and points
every TVM library loaded in this process at it. Without a C compiler, kernels keep TVM's
pool and :func:`use_for_loaded_kernels` says why.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from simpletvm.errors import SimpleTVMError
from simpletvm.store import user_cache_dir

SOURCE = Path(__file__).with_name("native") / "fork_join.c"


SPIN_VARIABLE = "TVM_THREAD_POOL_SPIN_COUNT"
# "tvm": keep TVM's pool (to compare the two); "timed": this pool, built to record its
# launches (:func:`launches_recorded`, for profiling kernels inside a model)
POOL_VARIABLE = "SIMPLETVM_FORK_JOIN_POOL"


class PoolUnavailable(SimpleTVMError, RuntimeError):
    """The pool could not be compiled or loaded here (no C compiler, say)."""


class PoolDeclined(PoolUnavailable):
    """The user asked for TVM's pool, or asked it not to spin: kernels stay on it."""


def use_for_loaded_kernels(threads: int) -> int:
    """Point every TVM library loaded in this process at the pool, sized to ``threads``
    threads (the caller's included); returns how many libraries use it. Call it again
    after loading a library. Raises :class:`PoolUnavailable` when the pool cannot be had,
    :class:`PoolDeclined` when ``SIMPLETVM_FORK_JOIN_POOL=tvm`` asks for TVM's pool or
    ``TVM_THREAD_POOL_SPIN_COUNT=0`` for workers that sleep at once (for machines shared
    with busy processes; this pool spins a while)."""
    if os.environ.get(POOL_VARIABLE, "").strip().lower() == "tvm":
        raise PoolDeclined(f"{POOL_VARIABLE}=tvm asks for TVM's pool")
    if os.environ.get(SPIN_VARIABLE, "").strip() == "0":
        raise PoolDeclined(f"{SPIN_VARIABLE}=0 asks for workers that do not spin")
    pool = _pool()
    set_threads(threads)
    return int(pool.simpletvm_install())


def pool_of(library_path: str | os.PathLike) -> str:
    """Which pool the loaded library at ``library_path`` launches its parallel loops on:
    ``"simpletvm"``, ``"tvm"``, or ``"no parallel loops"``."""
    dl = _dynamic_loader()
    handle = dl.dlopen(os.fsencode(library_path), os.RTLD_NOLOAD | os.RTLD_LAZY)
    if not handle:
        raise ValueError(f"{library_path} is not loaded in this process")
    try:
        slot = dl.dlsym(handle, b"__TVMBackendParallelLaunch")
        launcher = ctypes.c_void_p.from_address(slot).value if slot else None
    finally:
        dl.dlclose(handle)  # the look-up's reference, so that the library can be unloaded
    if launcher is None:
        return "no parallel loops"
    pool = _loaded_pool()
    ours = pool and ctypes.cast(pool.simpletvm_parallel_launch, ctypes.c_void_p).value
    return "simpletvm" if launcher == ours else "tvm"


@lru_cache(maxsize=1)
def _dynamic_loader() -> ctypes.CDLL:
    """The C library's dlopen, dlsym and dlclose (ctypes' own handles are never closed)."""
    dl = ctypes.CDLL(None)
    dl.dlopen.argtypes, dl.dlopen.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_void_p
    dl.dlsym.argtypes, dl.dlsym.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p
    dl.dlclose.argtypes, dl.dlclose.restype = [ctypes.c_void_p], ctypes.c_int
    return dl


def set_threads(count: int) -> None:
    """Resize the pool (a no-op until it is loaded: it starts at the first use)."""
    pool = _loaded_pool()
    if pool is not None:
        pool.simpletvm_set_threads(int(count))


def pool_threads() -> int | None:
    """The pool's thread count, or None when this process has not loaded it."""
    pool = _loaded_pool()
    return None if pool is None else int(pool.simpletvm_threads())


def _loaded_pool() -> ctypes.CDLL | None:
    """The pool if this process has loaded it (without compiling or loading it)."""
    return _pool() if _pool.cache_info().currsize else None


class LaunchTime(ctypes.Structure):
    """One recorded launch: the parallel lambda's address (a kernel's loop, named
    ``<kernel>_compute_`` in its library), its start and end (``time.monotonic``'s clock,
    seconds)."""

    _fields_ = [
        ("lambda_address", ctypes.c_void_p),
        ("start", ctypes.c_double),
        ("end", ctypes.c_double),
    ]


@contextmanager
def launches_recorded(capacity: int = 1 << 20) -> Iterator[list[LaunchTime]]:
    """Record every parallel loop launched from the calling thread while inside (the
    kernels of a model run, each loop's start and end): yields a list that holds the
    first ``capacity`` launches once the block exits. Needs the pool built to record
    (``SIMPLETVM_FORK_JOIN_POOL=timed`` before the pool loads), else raises
    :class:`PoolUnavailable`."""
    pool = _pool()
    if not hasattr(pool, "simpletvm_record_launches"):
        raise PoolUnavailable(
            f"this process's pool does not record launches: set {POOL_VARIABLE}=timed "
            "before SimpleTVM loads a module"
        )
    buffer = (LaunchTime * capacity)()
    recorded: list[LaunchTime] = []
    pool.simpletvm_record_launches(ctypes.cast(buffer, ctypes.c_void_p), capacity)
    try:
        yield recorded
    finally:
        count = pool.simpletvm_record_launches(None, 0)
        recorded.extend(buffer[:count])


def _timed_pool_requested() -> bool:
    return os.environ.get(POOL_VARIABLE, "").strip().lower() == "timed"


@lru_cache(maxsize=1)
def _pool() -> ctypes.CDLL:
    pool = ctypes.CDLL(str(compiled_library(timed=_timed_pool_requested())))
    if _timed_pool_requested():
        pool.simpletvm_record_launches.argtypes = [ctypes.c_void_p, ctypes.c_long]
        pool.simpletvm_record_launches.restype = ctypes.c_long
    pool.simpletvm_set_threads.argtypes = [ctypes.c_int]
    pool.simpletvm_threads.restype = ctypes.c_int
    pool.simpletvm_install.restype = ctypes.c_int
    return pool


def compiled_library(cache_dir: Path | None = None, *, timed: bool = False) -> Path:
    """The pool's shared library for this source, compiled into ``cache_dir`` (default:
    the user's cache directory) on first use; ``timed``: the build that records its
    launches. Raises :class:`PoolUnavailable`."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    library = (cache_dir or user_cache_dir()) / f"fork_join{'-timed' if timed else ''}-{digest}.so"
    if library.exists():
        return library
    compiler = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        try:
            result = subprocess.run(
                [
                    compiler,
                    "-O2",
                    "-std=gnu11",
                    "-shared",
                    "-fPIC",
                    "-pthread",
                    *(["-DSIMPLETVM_POOL_TIMING"] if timed else []),
                    str(SOURCE),
                    "-o",
                    str(built),
                    "-ldl",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError as error:
            raise PoolUnavailable(
                f"no C compiler ({compiler}: {error.strerror}); kernels "
                "keep TVM's pool: install gcc, or set CC"
            ) from error
        if result.returncode != 0:
            raise PoolUnavailable(
                f"{compiler} could not compile {SOURCE.name}: {result.stderr.strip()[-400:]}"
            )
        built.replace(library)  # atomic: processes compiling at once each keep a whole file
    return library
