"""The contestants of the closing round (:mod:`superb.final_round`) in this process: each
cell's module, loaded anew each round from a copy of what its run saved (a sweep with a
closing round has every run save its build) or else of its build again by the run's own
calls, and each peer on the model it was asked for, made once and checked against the
model's reference first. Everything runs on one seeded input and on
one thread count, the machine's physical cores.

A peer that is not installed, cannot read the model, or answers wrongly is not timed:
its outcome says why (and what to install), and the round goes on.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from .final_round import PEER, Cell, Contestants
from .fresh_loads import FreshLoads

# each peer's distribution, whose version the round records
PEER_PACKAGES = {
    "tflite": "tensorflow",
    "tensorflow": "tensorflow",
    "onnxruntime": "onnxruntime",
    "openvino": "openvino",
}


def provenance(threads: int) -> dict[str, Any]:
    """What the round ran on: the host's CPU (lscpu's name, LLVM's), the thread count,
    the project's commit (its version outside a git checkout) and TVM's version."""
    import simpletvm
    from simpletvm.hostinfo import host_description, library_versions

    from .sweep import project_commit

    host = host_description()
    versions = library_versions()
    return {
        "host": host["cpu"],
        "llvm_cpu": host["llvm_cpu"],
        "threads": threads,
        "commit": project_commit() or f"simpletvm {simpletvm.__version__}",
        "tvm_version": versions.get("apache-tvm"),
        "simpletvm_version": versions.get("simpletvm"),
    }


def contestants_of(params_by_run: dict[str, dict[str, Any]], store_root: Path, say=print):
    """The round's ``open_contestants``: ``params_by_run`` holds each run key's resolved
    parameters (the plan's), ``store_root`` the runs' store. The peers are made once; the
    cells' modules are loaded anew each round (:class:`superb.fresh_loads.FreshLoads`)."""

    @contextmanager
    def open_contestants(cells: list[Cell], seed: int) -> Iterator[Contestants]:
        from simpletvm.hostinfo import host_facts

        threads = int(host_facts()["physical_cores"])
        with tempfile.TemporaryDirectory(prefix="superb-") as scratch:
            maker = _Maker(params_by_run, store_root, seed, threads, Path(scratch), say)
            contestants = Contestants({}, {}, provenance(threads))
            loads = maker.module_loads([c for c in cells if c.kind != PEER], contestants)
            for cell in cells:
                if cell.kind == PEER:
                    maker.add_peer(cell, cells, contestants)
            maker.examples.clear()  # the peers are checked: their sessions are not needed
            contestants.reopen = partial(maker.fresh_modules, loads)
            yield contestants

    return open_contestants


@dataclass
class _Maker:
    """Makes the round's runners, keeping each model's imported session and input."""

    params_by_run: dict[str, dict[str, Any]]
    store_root: Path
    seed: int
    threads: int
    scratch: Path
    say: Any
    examples: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    contexts: dict[str, Any] = field(default_factory=dict)

    def module_loads(self, cells: list[Cell], contestants: Contestants) -> FreshLoads:
        """Each cell's saved module directory, to be loaded anew each round: the run's
        (a sweep with a closing round has every run save its build), else the module
        built again by the run's own calls and saved once to the scratch directory. A
        cell whose module cannot be had is left out, its outcome saying why."""
        from simpletvm import SimpleTVM
        from simpletvm.built_module import MODULE_FILE

        sources = {}
        for number, cell in enumerate(cells):
            try:
                calls, context = _calls_and_context(
                    self.params_by_run[cell.run], cell.run_id, self.store_root, self.threads
                )
                saved = context.store.module_dir(cell.run_id)
                if not (saved / MODULE_FILE).exists():
                    stvm = SimpleTVM(context).from_model(**calls["from_model"])
                    stvm.build(**calls["build"])
                    saved = self.scratch / "built" / str(number)
                    stvm.save(saved)
                    model = str(cell.params.get("param:model"))
                    self.examples.setdefault(model, (stvm, _input(stvm, self.seed)))
                self.contexts[cell.name] = context
                sources[cell.name] = saved
                contestants.outcomes[cell.name] = {"status": "ok"}
            except Exception as error:  # noqa: BLE001 - a cell that cannot run is noted
                self.failed(cell.name, error, contestants)
        return FreshLoads(sources, partial(self.runner, contestants), self.scratch / "rounds")

    @contextmanager
    def fresh_modules(self, loads: FreshLoads) -> Iterator[dict[str, Any]]:
        """One round's runners of the cells' modules, each loaded from a fresh copy, on
        the round's thread count."""
        from simpletvm.runtime.comparison import at_thread_counts

        with loads.round() as modules, at_thread_counts(modules, [self.threads]) as timed:
            yield {name: counts[self.threads] for name, counts in timed.items()}

    def runner(self, contestants: Contestants, name: str, directory: Path):
        """``name``'s module loaded from ``directory`` and made a runner; None (its
        outcome saying why) when it does not load."""
        from simpletvm import SimpleTVM
        from simpletvm.runtime.comparison import simpletvm_runner

        context = self.contexts[name]
        try:
            stvm = SimpleTVM(context).load(context.run_id, directory=directory)
            return simpletvm_runner(stvm, _input(stvm, self.seed))
        except Exception as error:  # noqa: BLE001 - a cell that cannot run is noted
            self.failed(name, error, contestants)
            return None

    def failed(self, name: str, error: BaseException, contestants: Contestants) -> None:
        contestants.outcomes[name] = {"status": "failed", "error": _gist(error)}
        self.say(f"closing round: {name} not timed: {_gist(error)}")

    def add_peer(self, cell: Cell, cells: list[Cell], contestants: Contestants) -> None:
        """Make ``cell``'s peer runner, check its answer, and add it or note why not."""
        from simpletvm.runtime.peers import PeerUnavailable, peer_error, peer_runner

        model = str(cell.params.get("param:model"))
        outcome: dict[str, Any] = {"peer_version": _version(cell.peer)}
        try:
            stvm, example = self.example(model, cells)
            runner = peer_runner(cell.peer, stvm.model, example, self.threads, self.scratch)
            expected, checked_by = _expected(stvm, example, self.threads)
            error, tolerance = peer_error(runner, expected)
            outcome["max_rel_error"] = error
            if not error <= tolerance:
                raise PeerUnavailable(
                    f"{cell.peer} disagrees with {checked_by} (relative error {error:.3g}, "
                    f"tolerance {tolerance:.3g})"
                )
        except PeerUnavailable as why:
            contestants.outcomes[cell.name] = {**outcome, "status": "not run", "error": str(why)}
            self.say(f"closing round: {cell.peer} not run on {Path(model).name}: {why}")
            return
        except Exception as error:  # noqa: BLE001 - a failing peer is noted, the round goes on
            contestants.outcomes[cell.name] = {**outcome, "status": "failed", "error": _gist(error)}
            self.say(f"closing round: {cell.peer} failed on {Path(model).name}: {_gist(error)}")
            return
        contestants.outcomes[cell.name] = {**outcome, "status": "ok"}
        contestants.runners[cell.name] = runner

    def example(self, model: str, cells: list[Cell]):
        """The model's imported session and input: a cell's, or imported again when its
        cells' modules were all loaded."""
        from simpletvm import SimpleTVM

        if model not in self.examples:
            cell = next(c for c in cells if c.run and str(c.params.get("param:model")) == model)
            calls, context = _calls_and_context(
                self.params_by_run[cell.run], cell.run_id, self.store_root
            )
            stvm = SimpleTVM(context).from_model(**calls["from_model"])
            self.examples[model] = (stvm, _input(stvm, self.seed))
        return self.examples[model]


def _calls_and_context(
    params: dict[str, Any], run_id: str, store_root: Path, threads: int | None = None
):
    """The run's SimpleTVM calls and a context of its id (whose context.json the round
    never writes); ``threads`` pins the context's thread count (the round times on one,
    so a load need not time each count to choose)."""
    from simpletvm import BenchmarkingContext

    from .parameters import calls_for

    calls = calls_for(params)
    options = dict(calls["context"])
    if threads is not None:
        options["num_threads"] = threads
    context = BenchmarkingContext(options.pop("target"), store=store_root, run_id=run_id, **options)
    return calls, context


def _input(stvm, seed: int):
    """The model's one input, drawn from ``seed`` as evaluate() draws it."""
    from simpletvm.runtime.evaluation import random_inputs

    inputs = random_inputs(stvm.model.inputs, seed)
    if len(inputs) != 1:
        raise ValueError(f"the closing round times one-input models; this one has {len(inputs)}")
    return inputs[0]


def _expected(stvm, example, threads: int):
    """The model's reference output on ``example`` and who computed it: its framework
    (:func:`simpletvm.runtime.reference.reference_for`)."""
    import numpy as np

    from simpletvm.runtime.peers import PeerUnavailable
    from simpletvm.runtime.reference import reference_for

    reference = reference_for(stvm.model, threads)
    if reference.run is None:
        raise PeerUnavailable(f"no reference to check its answers by: {reference.reason}")
    return np.asarray(reference.run([example])[0]), reference.framework


def _version(peer: str) -> str | None:
    try:
        return metadata.version(PEER_PACKAGES[peer])
    except metadata.PackageNotFoundError:
        return None


def _gist(error: BaseException) -> str:
    from simpletvm.errors import error_gist

    return error_gist(error)
