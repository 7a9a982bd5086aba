"""The run store: where runs, saved modules, tuning databases and sweep results live.

Layout under the root (``~/tvm-benchmark`` unless ``SIMPLETVM_HOME`` or an argument says
otherwise)::

    runs/<run_id>/run.log          log of that SimpleTVM execution
    runs/<run_id>/context.json     the saved BenchmarkingContext
    modules/<run_id>/              saved modules (library + metadata.json)
    records.sqlite                 every tuning record, with its run id; the best per
                                   workload and target (see simpletvm.tuning.records)
    cost_models/<target>.tar       per target, a cost model of every tuning job's
                                   measurements (see simpletvm.tuning.cost_model)
    superb/                        results of grid sweeps
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from filelock import FileLock

HOME_ENV = "SIMPLETVM_HOME"
DEFAULT_ROOT = Path("~/tvm-benchmark")
CACHE_ENV = "SIMPLETVM_CACHE_DIR"


def user_cache_dir() -> Path:
    """This user's cache of what SimpleTVM computes once per machine, whichever store is
    used: ``$SIMPLETVM_CACHE_DIR``, else ``$XDG_CACHE_HOME/simpletvm`` or
    ``~/.cache/simpletvm``; a directory under the temp root when the home is read-only."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = Path(os.environ.get(CACHE_ENV) or xdg / "simpletvm")
    try:
        root.mkdir(parents=True, exist_ok=True)
        return root
    except OSError:
        fallback = Path(tempfile.gettempdir()) / f"simpletvm-{os.getuid()}"
        fallback.mkdir(exist_ok=True)
        return fallback


def default_root() -> Path:
    """The store root: ``$SIMPLETVM_HOME`` if set, else ``~/tvm-benchmark``."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_ROOT).expanduser()


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so that readers see the old or the new content, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def file_lock(path: Path) -> FileLock:
    """An inter-process lock guarding ``path`` (a sibling ``.lock`` file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock")


def append_lines(path: Path, lines: Iterable[str]) -> None:
    """Append whole lines under a lock, in one write, so concurrent writers never interleave.

    A process killed mid-write can still leave a torn last line; readers skip it
    (see :func:`read_json_lines`).
    """
    payload = "".join(line.rstrip("\n") + "\n" for line in lines)
    if not payload:
        return
    with file_lock(path):
        with open(path, "ab") as handle:
            # A torn line left by a killed writer must not glue onto ours.
            if handle.tell() > 0:
                with open(path, "rb") as reader:
                    reader.seek(-1, os.SEEK_END)
                    if reader.read(1) != b"\n":
                        payload = "\n" + payload
            handle.write(payload.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())


def read_json_lines(path: Path) -> list[Any]:
    """Every well-formed JSON line of ``path``; torn or garbled lines are skipped."""
    return list(iter_json_lines(path))


def iter_json_lines(path: Path) -> Iterator[Any]:
    """:func:`read_json_lines` one line at a time, for files too large to hold."""
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


class RunStore:
    """Paths of the run store; creating it makes nothing until something is written."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root).expanduser() if root is not None else default_root()

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def context_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "context.json"

    def log_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "run.log"

    def module_dir(self, run_id: str) -> Path:
        return self.root / "modules" / run_id

    @property
    def records_path(self) -> Path:
        return self.root / "records.sqlite"

    def cost_model_path(self, target_key: str) -> Path:
        """The cost model of a target (``simpletvm.tuning.records.tvm_target_key``)."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", target_key).strip("_") or "target"
        return self.root / "cost_models" / f"{name}.tar"

    @property
    def superb_dir(self) -> Path:
        return self.root / "superb"

    @property
    def zoo_dir(self) -> Path:
        """Where built-in models are kept once converted (TFLite or ONNX files): this
        machine's cache, shared by every store, since a file depends only on the model's
        configuration and on the Keras that made its seeded weights."""
        return user_cache_dir() / "zoo" / f"keras-{_version('keras')}"

    def run_ids(self) -> list[str]:
        runs = self.root / "runs"
        return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "none"
