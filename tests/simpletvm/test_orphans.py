"""Tuning workers die with the process that started them, however it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

PARENT = textwrap.dedent("""
    import os, sys, time
    from tvm.support.popen_pool import PopenPoolExecutor
    from simpletvm._process.orphans import exit_with_parent

    def pid_after(seconds):
        import os, time
        time.sleep(seconds)
        return os.getpid()

    pool = PopenPoolExecutor(max_workers=2, initializer=exit_with_parent, initargs=(0.1,))
    futures = [pool.submit(pid_after, 0.5) for _ in range(2)]
    print(" ".join(str(pid) for pid in {f.result() for f in futures}), flush=True)
    time.sleep(600)
""")


def test_pool_workers_exit_when_their_parent_is_sigkilled():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert workers and all(psutil.pid_exists(pid) for pid in workers)
        assert all(psutil.Process(pid).ppid() == parent.pid for pid in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers)
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
