"""Scratch directories carry their process's pid; the sweep deletes those of the gone."""

from __future__ import annotations

import os
import subprocess
import sys

from simpletvm._process.scratch import (
    make_scratch_dir,
    scratch_directory,
    scratch_prefix,
    sweep_orphans,
)


def _gone_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_sweep_deletes_the_directories_of_ended_processes_only(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = _gone_pid()
        orphans = [
            tmp_path / f"simpletvm-build-{gone}-x1",
            tmp_path / f"simpletvm-records-{gone}-x2",
        ]
        kept = [
            tmp_path / f"simpletvm-module-{os.getpid()}-x3",  # this process's
            tmp_path / f"simpletvm-build-{live.pid}-x4",  # a running job's
            tmp_path / "simpletvm-k2j4x9",  # an earlier version's: whose, unknown
            tmp_path / f"other-build-{gone}-x5",
        ]
        for directory in orphans + kept:
            (directory / "sub").mkdir(parents=True)
            (directory / "sub" / "candidate.so").write_bytes(b"\0" * 64)
        (tmp_path / f"simpletvm-build-{gone}-file").write_text("a file, not a directory")

        assert sorted(sweep_orphans(str(tmp_path))) == sorted(str(d) for d in orphans)
        assert not any(d.exists() for d in orphans) and all(d.exists() for d in kept)
        assert (tmp_path / f"simpletvm-build-{gone}-file").exists()
        assert sweep_orphans(str(tmp_path)) == []
    finally:
        live.kill()
        live.wait()


def test_scratch_directories_are_named_after_their_process(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    made = make_scratch_dir("build")
    assert os.path.basename(made).startswith(scratch_prefix("build"))
    assert scratch_prefix("build") == f"simpletvm-build-{os.getpid()}-"
    with scratch_directory("module") as held:
        assert os.path.basename(held).startswith(f"simpletvm-module-{os.getpid()}-")
    assert not os.path.exists(held) and os.path.isdir(made)
    assert sweep_orphans() == []  # ours, while we run
