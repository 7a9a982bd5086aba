"""Grid files: expansion (product, fixed, zip, exclude, repetitions), overrides, keys,
and bad input named with file and line. Pure Python: nothing runs."""

from __future__ import annotations

import dataclasses

import pytest

from simpletvm.tuning.options import documented_options
from superb.grid import GridError, parse_grid, parse_override
from superb.parameters import PARAMETERS, calls_for
from superb.plan import build_plan, run_key

GRID = """\
name: sweep
fixed: {model: mobilenetv2, target: cpu, evaluate_repeat: 30}
grid:
  image_size: [96, 64, 32]
  alpha: [0.35, 0.5, 1.0]
  trials: [8, 16]
  transfer_learning: [true, false]
zip: [[image_size, alpha]]
exclude:
  - {image_size: 32, trials: 16}
  - {trials: [8], transfer_learning: false}
"""


def plan_of(text: str):
    return build_plan(parse_grid(text))


def test_product_with_zip_and_exclude_counts():
    plan = plan_of(GRID)
    # zip: 3 (image_size, alpha) pairs; x 2 trials x 2 transfer = 12, minus the excludes
    assert plan.excluded == [2, 3]  # (32, 16, *) twice; (*, 8, false) three times
    assert len(plan.runs) == 12 - 2 - 3
    pairs = {(r.params["image_size"], r.params["alpha"]) for r in plan.runs}
    assert pairs == {(96, 0.35), (64, 0.5), (32, 1.0)}
    assert all(
        r.params["evaluate_repeat"] == 30 and r.params["model"] == "mobilenetv2" for r in plan.runs
    )
    assert [r.index for r in plan.runs] == list(range(1, 8))
    assert plan.varying == ["image_size", "alpha", "trials", "transfer_learning"]


def test_plain_product_and_repetitions():
    plan = plan_of(
        "fixed: {model: m.onnx}\ngrid: {trials: [1, 2, 3], candidates_per_iteration: [4, 8]}\n"
        "repetitions: 2\n"
    )
    assert len(plan.runs) == 12
    assert [r.repetition for r in plan.runs] == [1] * 6 + [2] * 6  # every config once first
    assert len({r.key for r in plan.runs}) == 12


def test_keys_are_stable_and_survive_more_repetitions():
    once = plan_of("grid: {model: [a.onnx, b.onnx], trials: [4, 8]}\n")
    again = plan_of("grid: {trials: [4, 8], model: [a.onnx, b.onnx]}\nrepetitions: 3\n")
    assert {r.key for r in once.runs} == {r.key for r in again.runs if r.repetition == 1}
    assert run_key({"trials": 4, "model": "a.onnx"}) == run_key({"model": "a.onnx", "trials": 4})
    assert run_key({"trials": 4}) != run_key({"trials": 4}, repetition=2)


def test_command_line_params_add_and_replace_axes():
    grid = parse_grid(
        "fixed: {model: m.onnx, trials: 8}\ngrid: {candidates_per_iteration: [4, 8]}\n"
    )
    grid = grid.with_overrides(
        [
            parse_override("trials=8,16,32"),
            parse_override("candidates_per_iteration=2"),
            parse_override("transfer_learning=false"),
        ]
    )
    grid.validate()
    plan = build_plan(grid)
    assert len(plan.runs) == 3  # an axis replaced by one value, trials became an axis
    assert {r.params["candidates_per_iteration"] for r in plan.runs} == {2}
    assert {r.params["trials"] for r in plan.runs} == {8, 16, 32}
    assert all(r.params["transfer_learning"] is False for r in plan.runs)
    assert parse_override("timeout=null,2.5") == ("timeout", [None, 2.5])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("grid:\n  trials: [8, 16\n  model: [a]\n", r"grid.yaml:3:\d+: malformed YAML"),
        (
            "fixed: {model: m.onnx}\ngrid:\n  trails: [8, 16]\n",
            r"grid.yaml:3: unknown parameter 'trails' \(did you mean 'trials'\?\); known parameters: "
            r"target, ",
        ),
        ("fixed: {model: m.onnx}\ngrid:\n  trials: []\n", r"grid.yaml:3: axis 'trials' is empty"),
        (
            "fixed: {model: m.onnx}\ngrid:\n  trials:\n    - 8\n    - eight\n",
            r"grid.yaml:5: trials must be an integer, got 'eight'",
        ),
        (
            "fixed: {model: m.onnx}\ngrid: {trials: [8], population: [1, 2]}\n"
            "zip: [[trials, population]]\n",
            r"grid.yaml:3: zipped axes need the same number of values, got trials: 1, population: 2",
        ),
        (
            "fixed: {model: m.onnx}\ngrid: {trials: [8]}\nexclude:\n  - {trails: 8}\n",
            r"grid.yaml:4: exclude names 'trails', which the grid does not set \(did you mean 'trials'",
        ),
        (
            "fixed: {model: m.onnx}\ngrid: {trials: [8]}\nexclude: [{trials: 8}]\n",
            r"exclude patterns remove every combination",
        ),
        ("grid:\n  trials: [8]\n  trials: [16]\n", r"grid.yaml:3: 'trials' appears twice"),
        ("grids:\n  trials: [8]\n", r"grid.yaml:1: unknown key 'grids' \(did you mean 'grid'\?\)"),
        ("grid: {trials: [8]}\n", r"no model: set 'model' under fixed or grid"),
        ("- a\n- b\n", r"a grid file is a mapping"),
    ],
)
def test_bad_grids_name_file_and_line(tmp_path, text, expected):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(GridError, match=expected):
        build_plan(parse_grid(text, path))


def test_every_problem_is_reported_at_once(tmp_path):
    text = "fixed: {model: m.onnx, trails: 3}\ngrid:\n  trials: []\n  batch: [1]\n"
    with pytest.raises(GridError) as caught:
        parse_grid(text, tmp_path / "g.yaml")
    assert len(caught.value.problems) == 3


def test_bad_command_line_params():
    with pytest.raises(GridError, match="--param trails=3: unknown parameter 'trails'"):
        parse_override("trails=3")
    with pytest.raises(GridError, match="expected name=value1,value2"):
        parse_override("trials")
    with pytest.raises(GridError, match="axis 'trials' has an empty value"):
        parse_override("trials=8,,16")


def test_parameters_reach_their_calls():
    calls = calls_for(
        {
            "model": "m.onnx",
            "target": "cpu",
            "cpu_arch": "znver3",
            "model_batch_size": 2,
            "image_size": 64,
            "trials": 8,
            "candidates_per_iteration": 4,
            "profile_number": 2,
            "evaluate_repeat": 7,
            "save": True,
        }
    )
    assert calls["context"] == {"target": "cpu", "cpu_arch": "znver3"}
    assert calls["from_model"] == {"source": "m.onnx", "batch_size": 2, "image_size": 64}
    assert calls["autotune"] == {"trials": 8, "candidates_per_iteration": 4, "number": 2}
    assert calls["build"] == {"records": "run"} and calls["save"] is True
    assert calls["evaluate"] == {"repeat": 7}
    untuned = calls_for({"model": "m.onnx", "autotune": False, "evaluate": False})
    assert untuned["autotune"] is None and untuned["evaluate"] is None
    assert untuned["build"] == {"records": None}


def test_every_tuning_option_is_a_grid_parameter():
    from simpletvm.tuning.options import TuningOptions

    reachable = {p.argument for p in PARAMETERS.values() if p.call == "autotune"}
    fields = {f.name for f in dataclasses.fields(TuningOptions)} - {"extra"}
    assert fields <= reachable


def test_tuning_parameters_are_the_options_own():
    """Name, type, default and help of every tuning parameter come from TuningOptions."""
    for option in documented_options():
        (parameter,) = [
            p for p in PARAMETERS.values() if (p.call, p.argument) == ("autotune", option.name)
        ]
        assert parameter.nullable == option.nullable
        assert parameter.help == f"{option.help} (default: {option.default})"
    assert PARAMETERS["profile_number"].argument == "number"
    assert PARAMETERS["remeasure"].kind == "int" and PARAMETERS["timeout"].kind == "float"
    assert PARAMETERS["cache_flush"].kind == "bool-or-str"


def test_the_old_name_of_candidates_per_iteration_warns_and_is_read_as_it():
    """``batch_size`` is the model's batch (model_batch_size in a grid); grids written when
    it named the candidates per iteration still run, and are told the new name."""
    old_name = r"'batch_size' is the old name of the tuning option 'candidates_per_iteration'"
    with pytest.warns(FutureWarning, match=f"<grid>:2: {old_name}") as warned:
        grid = parse_grid(
            "fixed: {model: m.onnx}\ngrid: {trials: [1, 2], batch_size: [4, 8]}\n"
            "zip: [[trials, batch_size]]\nexclude: [{batch_size: 8}]\n"
        )
    assert len(warned) == 1
    assert grid.axes == {"trials": [1, 2], "candidates_per_iteration": [4, 8]}
    assert grid.zip == [["trials", "candidates_per_iteration"]]
    assert grid.exclude == [{"candidates_per_iteration": 8}]
    assert grid.where("grid", "candidates_per_iteration", 1) == "<grid>:2"
    assert [r.params for r in build_plan(grid).runs] == [
        {"trials": 1, "candidates_per_iteration": 4, "model": "m.onnx"}
    ]
    with pytest.warns(FutureWarning, match=f"--param batch_size=2: {old_name}"):
        assert parse_override("batch_size=2") == ("candidates_per_iteration", [2])
    with pytest.warns(FutureWarning), pytest.raises(GridError, match="keep one"):
        parse_grid("fixed: {model: m.onnx, batch_size: 4, candidates_per_iteration: 8}\n")
    assert "batch_size" not in PARAMETERS  # the model's batch is model_batch_size
