"""Temporary directories named after the process that made them, and the sweep that
deletes those whose process is gone.

A tuning job keeps its candidates' builds and a buffered copy of its records in
temporary directories, and a build that is not saved keeps its exported module in one
(7 MB for the quickstart model, about 50 MB for ResNet-18). A process that ends
normally deletes them; one that is killed cannot, nor, reliably, a scheduler's worker
process, which leaves through ``os._exit`` and is killed when slow to stop (the backends
close their jobs first, which closes their SimpleTVM), and a night-long sweep would
fill the temporary directory. Each directory's name carries its owner's pid, so the next tuning job on the
machine tells orphans from the directories of running jobs (:func:`sweep_orphans`).

Processes in another pid namespace (a container) that share this temporary directory
under the same user would look gone: give containers their own.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

PREFIX = "simpletvm-"
_OWNED = re.compile(rf"^{PREFIX}[a-z]+-(\d+)-")


def scratch_prefix(kind: str) -> str:
    """The name prefix of this process's scratch directories of ``kind`` (a word)."""
    return f"{PREFIX}{kind}-{os.getpid()}-"


def make_scratch_dir(kind: str) -> str:
    """A new scratch directory of this process; its creator deletes it when done."""
    return tempfile.mkdtemp(prefix=scratch_prefix(kind))


def scratch_directory(kind: str) -> tempfile.TemporaryDirectory:
    """A new scratch directory of this process, deleted with the returned object."""
    return tempfile.TemporaryDirectory(prefix=scratch_prefix(kind))


def sweep_orphans(directory: str | None = None) -> list[str]:
    """Delete the scratch directories, in ``directory`` (default: the temporary
    directory), of this user's processes that no longer run; returns their paths."""
    root = directory or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        owner = _OWNED.match(entry.name)
        try:
            if (
                owner is None
                or not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
                or _running(int(owner.group(1)))
            ):
                continue
        except OSError:  # deleted meanwhile (another job's sweep)
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
