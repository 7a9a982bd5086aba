"""The closing side-by-side round of a sweep: the modules its runs built (and the peers
asked for) timed in turns in one process, on one input and thread count, so that the
host's drift between runs, which each run's own evaluation cannot see, hits all alike.

Each round every contestant takes a turn (:func:`simpletvm.runtime.comparison.
time_side_by_side`), in the plan's order on even rounds and the reverse on odd ones, so
no contestant always follows the same neighbour. Each round loads the cells' modules
anew (:meth:`Contestants.round`): where a load places a module's code and weights sets
its speed for as long as it stays loaded, so one load per sweep would be a bias fixed for
the whole sweep; loaded each round, it is part of the spread between rounds, the samples
:func:`superb.statistics.decide` tests. Each round's samples go to the
experiment's log as it ends (a ``final_round`` event: a series of rounds named by what it
times), so a sweep stopped during the round resumes it where it was; ``final.csv`` is
rebuilt from the log: per contestant the median over every call of every round and its
bootstrap interval (:func:`superb.statistics.median_interval`).

Which modules come back and how they run is :mod:`superb.final_runners`' part; tests
pass fakes (:func:`run_final_round`'s ``open_contestants``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from simpletvm.store import atomic_write_text, read_json_lines

from .results import Experiment, RunStatus
from .statistics import median_interval

FINAL_CSV = "final.csv"
ROUNDS = 20  # a multiple of 4: the self band's halves hold each order equally often
CALLS = 10  # timed calls per contestant and round, at least ...
# ... and as many as fill this many seconds (up to MAX_CALLS): a fast model's median
# over ten calls of a tenth of a millisecond moves by several percent between rounds
TURN_S = 0.05
MAX_CALLS = 2000
WARMUP = 3  # untimed calls before each turn (and at least MIN_WARMUP_S of them)
SEED = 0
SIMPLETVM, PEER = "simpletvm", "peer"
# for tests: "<run index>:<fraction>" makes that run's cell slower by the fraction
# (a busy wait after each call), a planted regression for superb compare to find
SLOWDOWN_ENV = "SUPERB_TEST_SLOWDOWN"


@dataclass(frozen=True)
class Cell:
    """One contestant: a parameter combination's module (its first ok run's) or a peer on
    a model of the grid. ``params`` are the runs.csv ``param:`` columns it stands for."""

    name: str
    kind: str
    params: dict[str, Any]
    run: str | None = None
    run_id: str | None = None
    index: int | None = None
    peer: str | None = None
    median_ms: float | None = None  # the runs' own evaluation, to choose finalists by


@dataclass
class Contestants:
    """What :func:`run_final_round` times: ``runners``, a runner per cell name made once
    for every round (the peers'), ``reopen``, a context manager giving a round's runners
    made anew (the cells' modules, loaded again), each cell's outcome (``status``,
    ``error``, ``max_rel_error``, ``peer_version``) and the round's provenance (host, LLVM
    cpu, threads, versions, commit)."""

    runners: dict[str, Callable[[], Any]]
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    reopen: Callable[[], AbstractContextManager[dict[str, Callable[[], Any]]]] | None = None

    @contextmanager
    def round(self) -> Iterator[dict[str, Callable[[], Any]]]:
        """One round's runners: those made once and those ``reopen`` makes for it."""
        if self.reopen is None:
            yield dict(self.runners)
            return
        with self.reopen() as fresh:
            yield {**self.runners, **fresh}


def choose_cells(runs, finalists: int | None = None, peers: list[str] = ()) -> list[Cell]:
    """A cell per parameter combination with an ok run (its first), in plan order; with
    ``finalists`` only that many, the fastest by their runs' median latency; then each
    of ``peers`` on each model of those cells."""
    import pandas as pd

    params = [c for c in runs.columns if c.startswith("param:")]
    ok = runs[runs["status"] == RunStatus.OK]
    cells: list[Cell] = []
    for _, group in ok.groupby(params, dropna=False, sort=False) if params else []:
        first = group.sort_values("index").iloc[0]
        medians = pd.to_numeric(group["eval_median_ms"], errors="coerce")
        cells.append(
            Cell(
                f"{SIMPLETVM}:{first['run']}",
                SIMPLETVM,
                {c: first[c] for c in params},
                first["run"],
                first["run_id"],
                int(first["index"]),
                median_ms=float(medians.mean()) if medians.notna().any() else None,
            )
        )
    cells.sort(key=lambda cell: cell.index)
    if finalists is not None and len(cells) > finalists:
        ranked = sorted(cells, key=lambda c: (c.median_ms is None, c.median_ms or 0.0, c.index))
        chosen = {cell.name for cell in ranked[:finalists]}
        cells = [cell for cell in cells if cell.name in chosen]
    models = list(dict.fromkeys(str(cell.params.get("param:model")) for cell in cells))
    for model in models:
        for peer in peers:
            cells.append(Cell(f"{PEER}:{peer}:{model}", PEER, {"param:model": model}, peer=peer))
    return cells


def closing_round(
    plan,
    store=None,
    *,
    finalists: int | None = None,
    peers: list[str] = (),
    rounds: int = ROUNDS,
    say: Callable[[str], object] = print,
):
    """The closing round of ``plan``'s sweep in the store's experiment, holding its lock:
    its ok cells' modules and ``peers`` (:mod:`superb.final_runners`). Returns final.csv's
    frame (its path in ``attrs["path"]``), or None when no run is ok."""
    from simpletvm.console import native_output_to
    from simpletvm.store import RunStore

    from .final_runners import contestants_of

    run_store = RunStore(store)
    experiment = Experiment(run_store.superb_dir / plan.grid.name)
    experiment.acquire()
    try:
        runs = experiment.read_runs()
        runs = runs[runs["run"].isin({run.key for run in plan.runs})]
        cells = choose_cells(runs, finalists, list(peers))
        if not cells:
            say("closing round: no ok run to time")
            return None
        params = {run.key: plan.resolved_params(run) for run in plan.runs}
        open_contestants = contestants_of(params, run_store.root, say)
        # the peers' and TVM's native lines go to the experiment's logs, not the terminal
        with native_output_to(experiment.dir / "logs" / "final_round.log"):
            frame = run_final_round(experiment, cells, open_contestants, rounds=rounds, say=say)
    finally:
        experiment.release()
    frame.attrs["path"] = experiment.dir / FINAL_CSV
    return frame


def series_of(cells: list[Cell], rounds: int, calls: int, warmup: int, seed: int) -> str:
    """The name of a round's series: what it times and how. The same command finds its
    series again; another set of cells (runs added, retried) starts a new one."""
    text = json.dumps([[c.name for c in cells], rounds, calls, warmup, seed], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rounds_done(experiment: Experiment, series: str) -> list[dict[str, Any]]:
    """The ``final_round`` events of ``series`` in the log, one per round (the last kept)."""
    done: dict[int, dict[str, Any]] = {}
    for event in read_json_lines(experiment.log_path):
        if isinstance(event, dict) and event.get("event") == "final_round":
            if event.get("series") == series:
                done[event["round"]] = event
    return [done[number] for number in sorted(done)]


def run_final_round(
    experiment: Experiment,
    cells: list[Cell],
    open_contestants: Callable,
    *,
    rounds: int = ROUNDS,
    calls: int = CALLS,
    warmup: int = WARMUP,
    seed: int = SEED,
    say: Callable[[str], object] = print,
):
    """Time ``cells`` for the rounds the log does not hold yet and write final.csv;
    returns its frame. ``open_contestants(cells, seed)`` is a context manager giving
    the :class:`Contestants`; it is opened only when a round is left to run."""
    series = series_of(cells, rounds, calls, warmup, seed)
    done = rounds_done(experiment, series)
    if len(done) < rounds and cells:
        if done:
            say(f"closing round: resuming at round {len(done) + 1} of {rounds}")
        with open_contestants(cells, seed) as contestants:
            per_turn = None
            for number in range(len(done), rounds):
                # a function per round: its modules are let go before the next round loads
                per_turn, timed = time_round(contestants, cells, done, per_turn, calls, warmup)
                event = {"event": "final_round", "series": series, "round": number, "of": rounds}
                event |= timed | {"time": time.time()}
                experiment.record_final_round(event)
                done.append(event)
                count = len(event["samples_ms"])
                say(f"closing round {number + 1}/{rounds}: {count} timed side by side")
    frame = final_frame(cells, done, seed)
    atomic_write_text(experiment.dir / FINAL_CSV, frame.to_csv(index=False))
    return frame


def time_round(
    contestants: Contestants,
    cells: list[Cell],
    done: list[dict[str, Any]],
    per_turn: dict[str, int] | None,
    calls: int,
    warmup: int,
) -> tuple[dict[str, int], dict[str, Any]]:
    """One round: its runners taken from ``contestants``, in the cells' order on an even
    round (by the rounds ``done``) and the reverse on an odd one. Returns the calls per
    turn (``per_turn``, else sized on this round's runners) and the round's event."""
    from simpletvm.runtime.comparison import time_side_by_side

    with contestants.round() as made:
        runners = planted_slowdown(cells, made)
        names = [cell.name for cell in cells if cell.name in runners]
        if per_turn is None:
            per_turn = calls_per_turn(done, {n: runners[n] for n in names}, calls)
        names = [name for name in names if name in per_turn]
        order = names if len(done) % 2 == 0 else names[::-1]
        load_before = os.getloadavg()[0]
        samples = time_side_by_side({n: runners[n] for n in order}, 1, per_turn, warmup)
        load_after = os.getloadavg()[0]
    return per_turn, {
        "samples_ms": {n: [s * 1e3 for s in samples[n]] for n in names},
        "outcomes": contestants.outcomes,
        "provenance": contestants.provenance,
        "load_before": load_before,
        "load_after": load_after,
    }


def calls_per_turn(done: list[dict[str, Any]], runners: dict[str, Callable], least: int):
    """Each contestant's timed calls per turn: as many as its rounds already logged hold
    (a resumed series keeps its counts), else as many as fill :data:`TURN_S`."""
    from simpletvm.runtime.comparison import calls_filling

    if done:
        logged = done[0]["samples_ms"]
        if all(name in logged for name in runners):
            return {name: len(logged[name]) for name in runners}
    return calls_filling(runners, TURN_S, least, MAX_CALLS)


def planted_slowdown(cells: list[Cell], runners: dict[str, Callable]) -> dict[str, Callable]:
    """``runners``, the one of the cell :data:`SLOWDOWN_ENV` names made slower."""
    planted = os.environ.get(SLOWDOWN_ENV)
    if not planted:
        return runners
    index, _, fraction = planted.partition(":")
    slowed = dict(runners)
    for cell in cells:
        if cell.index is not None and str(cell.index) == index.strip() and cell.name in runners:
            slowed[cell.name] = slower(runners[cell.name], float(fraction))
    return slowed


def slower(runner: Callable[[], Any], fraction: float) -> Callable[[], Any]:
    """``runner`` taking ``fraction`` longer per call: it spins after each call."""

    def run():
        start = time.perf_counter()
        result = runner()
        until = start + (time.perf_counter() - start) * (1 + fraction)
        while time.perf_counter() < until:
            pass
        return result

    return run


def final_frame(cells: list[Cell], done: list[dict[str, Any]], seed: int):
    """final.csv: a row per cell with its median, interval, samples and provenance."""
    import pandas as pd

    last = done[-1] if done else {}
    provenance = last.get("provenance") or {}
    rows = []
    for cell in cells:
        rounds = [
            event["samples_ms"][cell.name]
            for event in done
            if cell.name in event.get("samples_ms", {})
        ]
        outcome = (last.get("outcomes") or {}).get(cell.name, {})
        median, low, high = median_interval(rounds, seed)
        rows.append(
            {
                "cell": cell.name,
                "kind": cell.kind,
                "peer": cell.peer or "",
                "run": cell.run,
                "run_id": cell.run_id,
                **cell.params,
                "status": outcome.get("status", "ok" if rounds else "not timed"),
                "error": outcome.get("error"),
                "median_ms": median,
                "low_ms": low,
                "high_ms": high,
                "samples": sum(len(r) for r in rounds),
                "rounds": len(rounds),
                "samples_ms": json.dumps(rounds),
                "max_rel_error": outcome.get("max_rel_error"),
                "peer_version": outcome.get("peer_version"),
                "seed": seed,
                **provenance,
                "load_before": done[0]["load_before"] if done else None,
                "load_after": last.get("load_after"),
            }
        )
    return pd.DataFrame(rows)


def read_final(experiment: Experiment):
    """final.csv as a frame, with each cell's per-round samples (``rounds_ms``: lists of
    lists of ms); raises FileNotFoundError without one."""
    import pandas as pd

    path = experiment.dir / FINAL_CSV
    if not path.exists():
        raise FileNotFoundError(
            f"{experiment.dir.name} has no {FINAL_CSV}: its sweep ran without the closing "
            "round (run `superb run` with it to make one)"
        )
    frame = pd.read_csv(path)
    frame["rounds_ms"] = [
        json.loads(text) if isinstance(text, str) else [] for text in frame["samples_ms"]
    ]
    return frame
