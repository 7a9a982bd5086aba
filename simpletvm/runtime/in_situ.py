"""Kernels timed inside a running model.

Every parallel loop of a compiled kernel goes through the fork-join pool; the pool built
to record (``SIMPLETVM_FORK_JOIN_POOL=timed``) notes each loop's lambda, start and end, so
a model run yields each kernel's share of it with two clock reads a loop and no call into
Python between kernels. The recording build is chosen when a process first loads the
pool, so :func:`time_builds` runs a worker process (``python -m
simpletvm.runtime.in_situ``) that loads several builds of one model and times them in
alternating rounds; the caller's own pool is never changed.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from simpletvm.errors import SimpleTVMError

BETWEEN = "between the loops"  # what no parallel loop covers: calls, the VM, serial code
WHOLE = "whole"  # the model run, timed without recording


class InSituTimingFailed(SimpleTVMError, RuntimeError):
    """The worker that times builds inside the model failed."""


@cache
def _text_symbols(path: str) -> tuple[list[int], list[str]]:
    """The code symbols of the library file at ``path`` (``nm``), by address: once per
    file and process."""
    found = []
    listing = subprocess.run(["nm", path], capture_output=True, text=True, check=False)
    for line in listing.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tT":
            found.append((int(parts[0], 16), parts[2]))
    found.sort()
    return [address for address, _ in found], [name for _, name in found]


def kernel_names() -> Callable[[int], str]:
    """A resolver from a parallel lambda's address to its kernel's name: the symbol
    (``<kernel>_compute_<n>``, local to the library) found with ``nm`` in the library file
    that ``/proc/self/maps`` says holds the address, less ``_compute_<n>`` and
    ``_prepacked``. Make it after the libraries are loaded (it reads the mappings once)."""
    maps = Path("/proc/self/maps").read_text().splitlines()

    def mapping_of(address: int) -> tuple[str, int] | None:
        for line in maps:
            parts = line.split(maxsplit=5)
            low, high = (int(n, 16) for n in parts[0].split("-"))
            if low <= address < high and len(parts) == 6:
                return parts[5], address - low + int(parts[2], 16)
        return None

    @cache
    def name_of(address: int) -> str:
        found = mapping_of(address)
        if found is None:
            return hex(address)
        path, offset = found
        addresses, names = _text_symbols(path)
        index = bisect_right(addresses, offset) - 1
        if index < 0:
            return hex(address)
        return re.sub(r"(_prepacked)?_compute_\d*$", "", names[index])

    return name_of


def kernel_ms(
    machine,
    device,
    arguments: list,
    runs: int,
    name_of: Callable[[int], str] | None = None,
    warmup_s: float | None = None,
) -> dict[str, list[float]]:
    """``runs`` timed runs of a model's ``main`` (a VirtualMachine ``machine`` on
    ``device``, given ``arguments``; warmed up first): per kernel name its ms in each run,
    :data:`BETWEEN`, and :data:`WHOLE` from as many runs again, not recorded. TVM's time
    evaluator times them, as ``evaluate()`` times a model: a call from Python (about 5 us
    a run) and the recording (2-5% of a 0.2 ms model of 55 kernels) would otherwise be
    counted in what the model is promised to run in. ``name_of``: a
    :func:`kernel_names` resolver to reuse across calls; ``warmup_s``: the warm-up's
    floor (by default :data:`~simpletvm.runtime.evaluation.MIN_WARMUP_S`). Needs the
    recording pool."""
    from simpletvm.runtime.evaluation import MIN_WARMUP_S, vm_timer
    from simpletvm.runtime.fork_join import launches_recorded

    floor = MIN_WARMUP_S if warmup_s is None else warmup_s
    timer = vm_timer(machine, device, arguments, warmup=5, repeat=runs, number=1, warmup_s=floor)
    with launches_recorded() as launches:
        recorded_ms = [seconds * 1e3 for seconds in timer()]
    whole_ms = [seconds * 1e3 for seconds in timer()]
    per_run = len(launches) // (runs + 1)
    launches = launches[per_run:]  # the evaluator's first call is not timed
    name_of = name_of or kernel_names()
    names = [name_of(launch.lambda_address) for launch in launches[:per_run]]
    spent: dict[str, list[float]] = {}
    for index in range(runs):
        one: dict[str, float] = {}
        for launch, name in zip(launches[index * per_run : (index + 1) * per_run], names):
            one[name] = one.get(name, 0.0) + (launch.end - launch.start) * 1e3
        one[BETWEEN] = recorded_ms[index] - sum(one.values())
        one[WHOLE] = whole_ms[index]
        for name, ms in one.items():
            spent.setdefault(name, []).append(ms)
    return spent


@dataclass(frozen=True)
class BuildTimings:
    """Builds of one model timed inside a worker: by thread count, per build, each
    kernel's median ms a model run (and :data:`BETWEEN`, :data:`WHOLE`)."""

    by_threads: dict[int, list[dict[str, float]]]

    @property
    def threads(self) -> int:
        """The count the first build runs fastest on as a whole."""
        return self.fastest(0)[1]

    @property
    def medians(self) -> list[dict[str, float]]:
        """Every build's medians on :attr:`threads`: kernels compared on the count the
        first build will run on."""
        return self.by_threads[self.threads]

    def fastest(self, build: int) -> tuple[float, int]:
        """Build ``build``'s whole-model median on the count it runs fastest on, and that
        count: as a build or load would leave the runtime for it."""
        return min((medians[build][WHOLE], count) for count, medians in self.by_threads.items())


def time_builds(
    libraries: list[str | os.PathLike],
    inputs: list[tuple[list[int], str]],
    *,
    threads: int,
    choose_threads: bool = False,
    rounds: int = 10,
    runs: int = 10,
    timeout_s: float = 600.0,
) -> BuildTimings:
    """Builds of one model (exported libraries whose ``main`` takes ``inputs``, each a
    (shape, dtype)), timed inside a worker process in ``rounds`` alternating rounds of
    ``runs`` runs on ``threads`` threads, or, with ``choose_threads``, on ``threads`` and
    on 1 in turns (unless one call takes so long that a build or load keeps every core,
    :mod:`simpletvm.runtime.threads`), so each build can be judged on the count it runs
    fastest on. Raises :class:`InSituTimingFailed`."""
    request = {
        "libraries": [str(p) for p in libraries],
        "inputs": inputs,
        "threads": threads,
        "choose_threads": choose_threads,
        "rounds": rounds,
        "runs": runs,
    }
    env = {**os.environ, "SIMPLETVM_FORK_JOIN_POOL": "timed", "TVM_NUM_THREADS": str(threads)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "simpletvm.runtime.in_situ"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise InSituTimingFailed(f"timing the builds took over {timeout_s:.0f} s") from error
    if done.returncode != 0:
        raise InSituTimingFailed(
            f"the in-situ timing worker exited with {done.returncode}: {done.stderr.strip()[-600:]}"
        )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return BuildTimings({int(count): medians for count, medians in answer.items()})


def _worker() -> None:
    """Read a request from standard input, print each build's medians by thread count as
    JSON."""
    import numpy as np
    import tvm
    from tvm import relax

    from simpletvm.runtime.evaluation import MIN_WARMUP_S, RETURN_WARMUP_S
    from simpletvm.runtime.fork_join import use_for_loaded_kernels
    from simpletvm.runtime.threads import set_runtime_threads, thread_counts_to_time

    request = json.loads(sys.stdin.read())
    device = tvm.cpu()
    machines = [
        relax.VirtualMachine(tvm.runtime.load_module(path), device) for path in request["libraries"]
    ]
    use_for_loaded_kernels(request["threads"])
    rng = np.random.default_rng(0)
    arguments = [
        tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype), device)
        for shape, dtype in request["inputs"]
    ]
    counts = [request["threads"]]
    if request["choose_threads"]:
        first = machines[0]["main"]
        counts = thread_counts_to_time(lambda: first(*arguments), request["threads"])
    name_of = kernel_names()  # every library is loaded: one resolver for all rounds
    samples = {count: [{} for _ in machines] for count in counts}
    # the first round follows the load and the thread-count choice: each build warms up
    # as after an idle machine; later turns follow another build's at once
    for round_ in range(request["rounds"]):
        order = list(range(len(machines)))
        if round_ % 2:
            order.reverse()
        floor = MIN_WARMUP_S if round_ == 0 else RETURN_WARMUP_S
        for count in counts:
            set_runtime_threads(count)
            for index in order:
                spent = kernel_ms(
                    machines[index], device, arguments, request["runs"], name_of, floor
                )
                for name, values in spent.items():
                    samples[count][index].setdefault(name, []).extend(values)
    medians = {
        count: [{name: statistics.median(v) for name, v in s.items()} for s in per_build]
        for count, per_build in samples.items()
    }
    print(json.dumps(medians))


if __name__ == "__main__":
    _worker()
