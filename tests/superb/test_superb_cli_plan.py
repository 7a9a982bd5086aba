"""superb plan, and the bad input superb run refuses before any run starts (exit 2)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def grid(write_grid, tiny_onnx):
    return write_grid(f"""
        name: planned
        fixed: {{model: {tiny_onnx}, autotune: false}}
        grid:
          evaluate_repeat: [3, 5, 7]
          evaluate_warmup: [0, 1]
        exclude: [{{evaluate_repeat: 7, evaluate_warmup: 1}}, {{evaluate_repeat: 9}}]
    """)


def test_plan_prints_the_runs_and_their_count(cli, grid, store):
    result = cli("plan", grid, "--store", store)
    assert result.exit_code == 0, result.output
    assert "planned: 5 runs" in result.stdout
    assert "exclude #1 removes 1 runs" in result.stdout
    assert "exclude #2 removes 0 runs (matches no combination: check it)" in result.stdout
    assert "5 runs, 0 already done" in result.stdout
    assert not (store / "superb").exists()  # nothing ran, nothing written


def test_plan_json_and_command_line_axes(cli, grid, store):
    result = cli(
        "plan",
        grid,
        "--store",
        store,
        "--json",
        "-p",
        "evaluate_warmup=0,1,2",
        "--param",
        "evaluate_number=2",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["count"] == 3 * 3 - 1 and len(data["runs"]) == 8
    assert all(
        run["params"]["evaluate_number"] == 2 and run["done"] is False for run in data["runs"]
    )


def test_run_refuses_bad_input_before_running(cli, write_grid, store, tiny_onnx):
    path = write_grid(f"""
        fixed: {{model: {tiny_onnx}}}
        grid:
          trails: [8, 16]
          candidates_per_iteration: []
    """)
    result = cli("run", path, "--store", store)
    assert result.exit_code == 2
    assert f"{path}:3: unknown parameter 'trails' (did you mean 'trials'?)" in result.stderr
    assert f"{path}:4: axis 'candidates_per_iteration' is empty" in result.stderr
    assert not (store / "superb").exists()


def test_malformed_yaml_is_exit_2_with_line(cli, write_grid, store):
    path = write_grid("grid:\n  trials: [8, 16\n  model: [a]\n")
    result = cli("run", path, "--store", store)
    assert result.exit_code == 2 and f"{path}:3:" in result.stderr
    assert "malformed YAML" in result.stderr


def test_missing_grid_file_is_exit_2(cli, tmp_path):
    result = cli("plan", tmp_path / "nope.yaml")
    assert result.exit_code == 2 and "cannot read the grid file" in result.stderr


def test_missing_model_impossible_target_and_bad_options(cli, write_grid, store, tiny_onnx):
    path = write_grid(f"""
        grid:
          model: [{tiny_onnx}, models/missing.onnx]
          target: [cpu, tpu]
          trials: [0, 4]
    """)
    result = cli("run", path, "--store", store)
    assert result.exit_code == 2
    errors = result.stderr
    lines = errors.splitlines()
    assert len(lines) == 3  # in the order of the file
    assert lines[0].startswith(f"error: {path}:2: ")
    assert "missing.onnx' is neither an existing file" in lines[0]
    assert str(path.parent / "models" / "missing.onnx") in lines[0]  # relative to the grid
    assert lines[1].startswith(f"error: {path}:3: unknown target 'tpu'")
    assert lines[2].startswith(f"error: {path}:4: run 1 ")
    assert "trials must be at least 1" in lines[2]
    assert not (store / "superb").exists()


def test_unknown_cpu_arch_is_refused(cli, write_grid, store, tiny_onnx):
    path = write_grid(f"fixed: {{model: {tiny_onnx}, cpu_arch: skylakee, autotune: false}}\n")
    result = cli("plan", path, "--store", store)
    assert result.exit_code == 2
    assert (
        f"{path}:1: LLVM does not know the CPU 'skylakee' (did you mean 'skylake'?)"
        in result.stderr
    )


def test_cuda_without_a_gpu_is_refused(cli, write_grid, store, tiny_onnx):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    path = write_grid(
        f"fixed: {{model: {tiny_onnx}, autotune: false}}\ngrid: {{target: [cpu, cuda]}}\n"
    )
    result = cli("run", path, "--store", store)
    assert result.exit_code == 2
    assert f"{path}:2: target cuda needs an NVIDIA GPU" in result.stderr


def test_named_tracker_must_have_the_device_keys(cli, write_grid, store, tiny_onnx):
    path = write_grid(f"fixed: {{model: {tiny_onnx}, trials: 4}}\n")
    result = cli("run", path, "--store", store, "--tracker", "127.0.0.1:1")
    assert result.exit_code == 2
    assert "--tracker 127.0.0.1:1: cannot reach the RPC tracker" in result.stderr
    result = cli("run", path, "--store", store, "--tracker", "nonsense")
    assert result.exit_code == 2 and "expected HOST:PORT" in result.output + result.stderr


def test_parameters_command_lists_every_parameter(cli):
    from superb.parameters import PARAMETERS

    result = cli("parameters")
    assert result.exit_code == 0
    assert all(name in result.stdout for name in PARAMETERS)
