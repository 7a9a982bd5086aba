"""`simpletvm tune / compile / run / benchmark`: one model at a time, bad input exits 2."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from simpletvm.cli import app


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def flat(result) -> str:
    return " ".join(result.output.split())


@pytest.fixture
def x(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype("float32"))
    return path


def test_compile_then_run_matches_onnxruntime(tmp_path, store, tiny_onnx, x):
    module = tmp_path / "module"
    result = invoke("compile", tiny_onnx, "--records", "none", "-o", module, "--store", store)
    assert result.exit_code == 0, result.output
    assert (module / "model.so").exists() and (module / "metadata.json").exists()
    result = invoke("run", module, "--input", x, "-o", tmp_path / "y.npy", "--store", store)
    assert result.exit_code == 0, result.output
    session = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": np.load(x)})[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)
    printed = invoke("run", module, "-i", f"x={x}", "--store", store)
    assert printed.exit_code == 0 and "output 0: shape (1, 10)" in flat(printed)


@pytest.mark.parametrize("args,message", [
    (["compile", "missing.onnx", "-o", "out"], "missing.onnx' is neither an existing file"),
    (["compile", "{onnx}", "--records", "0" * 32, "-o", "out"], "no run with that id"),
    (["run", "{tmp}", "--input", "x.npy"], "holds no compiled module .* simpletvm compile"),
    (["tune", "{onnx}", "--input-shape", "x:1,three"], "is not NAME:1,224,224,3"),
    (["tune", "{onnx}", "--input-shape", "y:1,3,8,8"], "input_shapes names \\['y'\\]"),
])
def test_bad_input_exits_2_naming_the_fix(tmp_path, store, tiny_onnx, args, message):
    args = [a.format(onnx=tiny_onnx, tmp=tmp_path) for a in args]
    result = invoke(*args, "--store", store)
    assert result.exit_code == 2, result.output
    assert re.search(message, flat(result)), result.output


@pytest.mark.slow
def test_tune_in_a_real_process_then_benchmark_its_run(tmp_path, store, tiny_onnx):
    done = subprocess.run(
        [sys.executable, "-m", "simpletvm", "tune", str(tiny_onnx), "--minutes", "0.05",
         "--seed", "0", "--store", str(store)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    output = " ".join(done.stdout.split())
    run_id = re.search(r"run id (\w{32})", output).group(1)
    trials, tasks = map(int, re.search(r"(\d+) trials over (\d+) tasks", output).groups())
    assert trials >= tasks  # a 3-second budget still measures every task once, then stops
    assert f"simpletvm compile {tiny_onnx} --records {run_id}" in output
    result = invoke("benchmark", run_id, "--rounds", "2", "--calls", "5", "--store", store)
    assert result.exit_code == 0, result.output
    text = flat(result)
    for name in ("untuned", f"tuned ({run_id})", "onnxruntime"):
        assert re.search(re.escape(name) + r" [\d.]+ ms [\d.]+x tuned", text), text
    assert re.search(r"tuning made it [\d.]+x faster than untuned", text)
