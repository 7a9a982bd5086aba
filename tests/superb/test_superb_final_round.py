"""The closing round on fakes and synthetic experiments (no SimpleTVM runs): its turns'
order, its modules loaded anew each round, its resume from the log, superb compare's
verdicts and exit code, report --plot, and the inputs it refuses."""

from __future__ import annotations

import contextlib
import json
import sys
import time

import numpy as np
import pandas as pd
import pytest
from test_superb_results import fake_row, write_experiment

from superb.final_round import (
    CALLS,
    FINAL_CSV,
    MAX_CALLS,
    SLOWDOWN_ENV,
    Cell,
    Contestants,
    calls_per_turn,
    choose_cells,
    final_frame,
    planted_slowdown,
    rounds_done,
    run_final_round,
    series_of,
    slower,
)
from superb.fresh_loads import FreshLoads
from superb.results import Experiment
from superb.statistics import median_interval


def samples(seed: int, scale: float = 1.0, n: int = 200) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(0.0, 0.05, n) * 10.0 * scale)


def test_the_median_interval_is_seeded_and_holds_the_median():
    rounds = [samples(i, n=20) for i in range(5)]
    median, low, high = median_interval(rounds, seed=3)
    assert low <= median <= high
    assert median_interval(rounds, seed=3) == (median, low, high)
    assert all(v != v for v in median_interval([], seed=3))


def cells(*names: str) -> list[Cell]:
    return [
        Cell(f"simpletvm:{n}", "simpletvm", {"param:x": n}, n, n * 4, i)
        for i, n in enumerate(names, 1)
    ]


def fake_contestants(calls: list[str], opened: list[int], reopened: list[int] | None = None):
    """Contestants whose cells' runners are made anew each round (``reopened`` counts
    the rounds that made them), as the modules are loaded anew."""
    reopened = [] if reopened is None else reopened

    @contextlib.contextmanager
    def open_contestants(the_cells, seed):
        opened.append(seed)

        def runner(name):
            def run():
                if not calls or calls[-1] != name:
                    calls.append(name)  # one entry per turn
                return name

            return run

        @contextlib.contextmanager
        def reopen():
            reopened.append(len(reopened))
            yield {c.name: runner(c.name) for c in the_cells}

        yield Contestants(
            {},
            {c.name: {"status": "ok"} for c in the_cells},
            {"host": "fake cpu", "llvm_cpu": "fake", "threads": 1, "commit": "abc"},
            reopen,
        )

    return open_contestants


def test_contestants_take_turns_each_round_the_order_reversed(tmp_path, monkeypatch):
    from simpletvm.runtime import comparison

    orders = []
    real = comparison.time_side_by_side

    def spy(runners, rounds, *args, **kwargs):
        orders.append((list(runners), rounds))
        return real(runners, rounds, *args, **kwargs)

    monkeypatch.setattr(comparison, "time_side_by_side", spy)
    # the calls per turn as asked (the calibration is tested on its own)
    sized = []

    def calls_filling(runners, seconds, least, most):
        sized.append(list(runners))
        return dict.fromkeys(runners, least)

    monkeypatch.setattr(comparison, "calls_filling", calls_filling)
    experiment = Experiment(tmp_path / "exp")
    experiment.dir.mkdir()
    turns: list[str] = []
    reopened: list[int] = []
    the_cells = cells("a", "b", "c")
    frame = run_final_round(
        experiment, the_cells, fake_contestants(turns, [], reopened), rounds=3, calls=2, warmup=0
    )
    a, b, c = (cell.name for cell in the_cells)
    assert orders == [([a, b, c], 1), ([c, b, a], 1), ([a, b, c], 1)]
    assert reopened == [0, 1, 2] and sized == [[a, b, c]]  # made anew, sized on the first
    assert turns == [a, b, c, b, a, b, c]  # the calls, a turn's run of calls as one
    assert list(frame["samples"]) == [6, 6, 6] and list(frame["rounds"]) == [3, 3, 3]
    assert set(frame["host"]) == {"fake cpu"} and (experiment.dir / FINAL_CSV).exists()
    assert len(rounds_done(experiment, series_of(the_cells, 3, 2, 0, 0))) == 3


def test_a_turn_holds_as_many_calls_as_fill_its_time_and_a_resumed_series_keeps_them():
    """A fast contestant gets many calls a turn, a slow one the least; a series resumed
    from the log keeps the counts its logged rounds hold."""
    fast = lambda: None  # noqa: E731
    slow = lambda: time.sleep(0.02)  # noqa: E731 - 0.02 s: TURN_S holds three such calls
    counts = calls_per_turn([], {"fast": fast, "slow": slow}, least=5)
    assert counts["slow"] == 5 and counts["fast"] == MAX_CALLS
    logged = [{"samples_ms": {"fast": [0.1] * 40, "slow": [20.0] * 7}}]
    assert calls_per_turn(logged, {"fast": fast, "slow": slow}, least=5) == {"fast": 40, "slow": 7}


def test_an_interrupted_round_resumes_from_the_log_and_a_finished_one_is_not_redone(tmp_path):
    experiment = Experiment(tmp_path / "exp")
    experiment.dir.mkdir()
    the_cells = cells("a", "b")
    series = series_of(the_cells, 3, 2, 0, 0)
    for number in range(2):  # the rounds logged before the sweep was stopped
        experiment.record_final_round(
            {
                "event": "final_round",
                "series": series,
                "round": number,
                "samples_ms": {c.name: [1.0, 1.0] for c in the_cells},
                "load_before": 1.0,
                "load_after": 1.0,
            }
        )
    experiment.record_final_round({"event": "final_round", "series": "other", "round": 2})
    turns: list[str] = []
    said: list[str] = []
    reopened: list[int] = []
    frame = run_final_round(
        experiment,
        the_cells,
        fake_contestants(turns, [], reopened),
        rounds=3,
        calls=2,
        warmup=0,
        say=said.append,
    )
    assert turns == [the_cells[0].name, the_cells[1].name]  # round 3 only: even, in order
    assert "resuming at round 3 of 3" in said[0] and reopened == [0]
    assert list(frame["samples"]) == [6, 6]
    opened: list[int] = []
    again = run_final_round(
        experiment, the_cells, fake_contestants([], opened), rounds=3, calls=2, warmup=0
    )
    assert opened == [] and list(again["samples"]) == [6, 6]


def test_each_round_loads_every_module_from_a_fresh_copy_the_last_ones_let_go(tmp_path):
    """The loader is called once per cell and round, each time on a copy in a directory
    of its own; the previous round's copies are gone before the next round loads, and a
    module that does not load is left out of its round."""
    sources = {}
    for name in ("a", "b", "broken"):
        sources[name] = tmp_path / "store" / name
        sources[name].mkdir(parents=True)
        (sources[name] / "model.so").write_text(name)
    loaded: list[tuple[int, str, object]] = []
    rounds = []

    def load(name, directory):
        assert (directory / "model.so").read_text() == name
        assert all(not d.exists() for r, _, d in loaded if r < len(rounds))
        loaded.append((len(rounds), name, directory))
        return None if name == "broken" else f"runner of {name}"

    loads = FreshLoads(sources, load, tmp_path / "scratch")
    for _ in range(3):
        with loads.round() as runners:
            rounds.append(runners)
            assert runners == {"a": "runner of a", "b": "runner of b"}
    assert [(r, name) for r, name, _ in loaded] == [
        (r, name) for r in range(3) for name in ("a", "b", "broken")
    ]
    directories = [d for _, _, d in loaded]
    assert len(set(directories)) == 9 and not any(d.exists() for d in directories)
    assert all(tmp_path / "store" not in d.parents for d in directories)


def test_finalists_are_the_fastest_cells_and_peers_join_each_model(tmp_path):
    rows = [
        fake_row(i, {"model": m, "trials": t}, median)
        for i, (m, t, median) in enumerate(
            [("a", 1, 3.0), ("a", 2, 1.0), ("b", 1, 2.0), ("b", 2, 9.0)], 1
        )
    ]
    runs = write_experiment(tmp_path / "exp", rows).read_runs()
    chosen = choose_cells(runs, finalists=2, peers=["onnxruntime"])
    assert [c.index for c in chosen if c.kind == "simpletvm"] == [2, 3]
    assert [c.name for c in chosen if c.kind == "peer"] == [
        "peer:onnxruntime:a",
        "peer:onnxruntime:b",
    ]
    assert len(choose_cells(runs)) == 4


def test_the_planted_slowdown_slows_the_cell_it_names(monkeypatch):
    def sleeper():
        time.sleep(0.01)

    start = time.perf_counter()
    slower(sleeper, 0.5)()
    assert time.perf_counter() - start >= 0.015
    monkeypatch.setenv(SLOWDOWN_ENV, "2:0.05")
    the_cells = cells("a", "b")
    wrapped = planted_slowdown(the_cells, {c.name: sleeper for c in the_cells})
    assert wrapped[the_cells[0].name] is sleeper and wrapped[the_cells[1].name] is not sleeper


def write_final(directory, scale_of_b: float = 1.0, seed: int = 0, count: int = 6) -> Experiment:
    """A synthetic experiment: two cells and a peer, ``count`` rounds of 20 calls each."""
    rows = [fake_row(i, {"model": "m", "alpha": a}, 1.0) for i, a in enumerate([0.35, 0.5], 1)]
    experiment = write_experiment(directory, rows)
    runs = experiment.read_runs()
    the_cells = choose_cells(runs, peers=["onnxruntime"])
    rng = np.random.default_rng(seed)
    done = []
    for number in range(count):
        done.append(
            {
                "round": number,
                "samples_ms": {
                    c.name: list(
                        rng.lognormal(0, 0.03, 20)
                        * (2.0 if c.kind == "peer" else 1.0)
                        * (scale_of_b if c.index == 2 else 1.0)
                    )
                    for c in the_cells
                },
                "outcomes": {c.name: {"status": "ok"} for c in the_cells},
                "provenance": {"host": "cpu", "llvm_cpu": "x", "threads": 2, "commit": "abc"},
                "load_before": 0.5,
                "load_after": 0.6,
            }
        )
    final_frame(the_cells, done, 0).to_csv(experiment.dir / FINAL_CSV, index=False)
    return experiment


def test_compare_fails_on_a_regression_beyond_noise_and_names_the_cell(cli, tmp_path):
    base = write_final(tmp_path / "a", seed=1)
    same = write_final(tmp_path / "b", seed=2)
    worse = write_final(tmp_path / "c", 1.10, seed=3)
    result = cli("compare", base.dir, same.dir, "--fail-on-regression", "5")
    assert result.exit_code == 0, result.output
    assert "Mann-Whitney U on the round medians" in result.stdout and "3 same" in result.stdout
    result = cli("compare", base.dir, worse.dir, "--fail-on-regression", "5")
    assert result.exit_code == 1, result.output
    assert "regression beyond noise and 5%: alpha=0.5" in result.stdout
    assert "2 same, 1 slower" in result.stdout
    assert cli("compare", base.dir, worse.dir, "--fail-on-regression", "20").exit_code == 0
    band = cli("compare", base.dir)
    assert (
        band.exit_code == 0
        and "rounds 0, 3, 4, 7, ... (A) against rounds 1, 2, 5, 6, ... (B)" in band.stdout
    )
    assert "noise band" in band.stdout


def test_report_ranks_the_cells_and_plots_them(cli, tmp_path):
    experiment = write_final(tmp_path / "a", 1.001)
    result = cli("report", experiment.dir, "--plot")
    assert result.exit_code == 0, result.output
    assert "indistinguishable from the best" in result.stdout
    png = experiment.dir / "final.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    final = json.loads(pd.read_csv(experiment.dir / FINAL_CSV)["samples_ms"].iloc[0])
    assert len(final) == 6 and len(final[0]) == 20


def test_plot_without_matplotlib_names_the_install(cli, tmp_path, monkeypatch):
    experiment = write_final(tmp_path / "a")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = cli("report", experiment.dir, "--plot")
    assert result.exit_code == 2 and "pip install" in result.stderr


def test_a_peer_that_cannot_be_imported_is_named_with_its_install(tmp_path, monkeypatch):
    from simpletvm.models.base import ImportedModel
    from simpletvm.runtime.peers import PeerUnavailable, peer_runner

    monkeypatch.setitem(sys.modules, "openvino", None)
    model = ImportedModel(None, [], [], str(tmp_path / "m.onnx"), "onnx")
    with pytest.raises(PeerUnavailable, match=r"openvino is not installed.*pip install"):
        peer_runner("openvino", model, np.zeros(1, "float32"), 1, tmp_path)
    with pytest.raises(PeerUnavailable, match="does not run onnx models"):
        peer_runner("tflite", model, np.zeros(1, "float32"), 1, tmp_path)


def test_unknown_peers_and_bad_finalists_are_refused(cli, write_grid, store, tiny_onnx):
    grid = write_grid(f"fixed: {{model: {tiny_onnx}, peers: [tflite, pytorch]}}\n")
    result = cli("plan", grid, "--no-check")
    assert result.exit_code == 2
    assert "unknown peer(s) pytorch" in result.stderr and "onnxruntime" in result.stderr
    good = write_grid(f"fixed: {{model: {tiny_onnx}, autotune: false}}\n", "good.yaml")
    result = cli("run", good, "--store", store, "--peers", "onnxruntime,nope")
    assert result.exit_code == 2 and "unknown peer(s) nope" in result.stderr
    for finalists in ("-1", "0"):
        assert cli("run", good, "--store", store, "--finalists", finalists).exit_code == 2
    assert not (store / "superb").exists()


@pytest.mark.slow
def test_a_real_sweep_closes_with_its_modules_and_a_peer_side_by_side(
    cli, write_grid, store, tiny_onnx, monkeypatch
):
    """Two untuned runs of the tiny model, then their modules and ONNX Runtime timed in
    turns, the modules loaded anew each round and unloaded after it; OpenVINO made
    impossible to import is named with its install, and the sweep still exits 0."""
    monkeypatch.setitem(sys.modules, "openvino", None)
    grid = write_grid(f"""
        name: closing
        fixed: {{model: {tiny_onnx}, autotune: false, evaluate_repeat: 3, evaluate_warmup: 1,
                 peers: [onnxruntime]}}
        grid:
          evaluate_number: [1, 2]
    """)
    result = cli("run", grid, "--store", store, "--peers", "openvino", "--rounds", "2")
    assert result.exit_code == 0, result.output
    assert "openvino not run on tiny.onnx: openvino is not installed" in result.stdout
    assert "pip install" in result.stdout and "closing round 2/2" in result.stdout
    with open("/proc/self/maps") as maps:  # every round's copies are unloaded
        assert not [line for line in maps if "/rounds/round-" in line]
    final = pd.read_csv(store / "superb" / "closing" / FINAL_CSV)
    timed = final[final["status"] == "ok"]
    assert sorted(timed["kind"]) == ["peer", "simpletvm", "simpletvm"]
    assert (timed["low_ms"] <= timed["median_ms"]).all()
    assert (timed["median_ms"] <= timed["high_ms"]).all()
    # two rounds of at least CALLS timed calls a turn, as many as fill the turn's time
    assert set(timed["rounds"]) == {2} and (timed["samples"] >= 2 * CALLS).all()
    assert (timed["samples"] % 2 == 0).all() and timed["peer_version"].notna().sum() == 1
    assert timed["max_rel_error"].dropna().le(1e-3).all()
    for column in ("host", "llvm_cpu", "commit", "tvm_version", "simpletvm_version", "seed"):
        assert final[column].notna().all(), column
    again = cli("run", grid, "--store", store, "--rounds", "2", "--peers", "openvino")
    assert again.exit_code == 0 and "closing round 1/2" not in again.stdout
