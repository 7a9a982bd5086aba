"""`simpletvm tune / compile / run / benchmark`: one model at a time, here or on an RPC
server. Exit codes as superb's: a step failing on the model exits 1, bad input 2, an
unexpected error 3 naming the log of its traceback, Ctrl-C 130."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from model_factories import make_expand_dims_tflite
from typer.testing import CliRunner

from simpletvm import BenchmarkingContext
from simpletvm.cli import app
from simpletvm.cli.reports import tuning_verdict
from simpletvm.exit_codes import ExitCode, honour_ctrl_c
from simpletvm.remote.rpc import LocalRPC
from simpletvm.store import RunStore

KEY = "cli-device"


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


def test_a_build_with_wrong_answers_exits_4_and_is_not_saved(
    tmp_path, store, tiny_onnx, source_off_by
):
    source_off_by(0.05)  # the module now 0.05 / 1.05 away from ONNX Runtime's answers
    module = tmp_path / "module"
    result = invoke("compile", tiny_onnx, "--records", "none", "-o", module, "--store", store)
    assert result.exit_code == ExitCode.WRONG_ANSWER == 4, result.output
    text = flat(result)
    assert "error: the built module computes a different answer from the model" in text
    assert "output 'y' is 4.76e-02 away from onnxruntime's" in text and "--tolerance" in text
    assert not (module / "model.so").exists()
    runs = RunStore(store)  # the build's run stays, failed: it shows what it answered
    assert [BenchmarkingContext.load(run, runs).status for run in runs.run_ids()] == ["failed"]
    # a difference the user accepts: the error printed with the build
    result = invoke(
        "compile",
        tiny_onnx,
        "--records",
        "none",
        "-o",
        module,
        "--store",
        store,
        "--tolerance",
        "0.1",
    )
    assert result.exit_code == 0, result.output
    assert "untuned (no records), rel. error 4.8e-02 vs onnxruntime ->" in flat(result)
    assert (module / "model.so").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["compile", "missing.onnx", "-o", "out"], "missing.onnx' is neither an existing file"),
        (["compile", "{onnx}", "--records", "0" * 32, "-o", "out"], "no run with that id"),
        (["run", "{tmp}", "--input", "x.npy"], "holds no compiled module .* simpletvm compile"),
        (["tune", "{onnx}", "--input-shape", "x:1,three"], "is not NAME:1,224,224,3"),
        (["tune", "{onnx}", "--input-shape", "y:1,3,8,8"], "input_shapes names \\['y'\\]"),
        (
            ["run", "{tmp}", "-i", "x.npy", "--tracker", "127.0.0.1:1", "--device-key", "k"],
            "cannot reach the RPC tracker at 127.0.0.1:1 .*rpc_tracker` or leave out --tracker",
        ),
        (
            ["benchmark", "{onnx}", "--tracker", "tracker.lan", "--device-key", "k"],
            "is not HOST:PORT",
        ),
        (["tune", "{onnx}", "--tracker", "127.0.0.1:9190"], "give --device-key KEY"),
        (["run", "{tmp}", "-i", "x.npy", "--device-key", "k"], "needs --tracker HOST:PORT"),
        (
            ["quickstart", "--threads", "0"],
            "'--threads': Input should be greater than or equal to 1",
        ),
    ],
)
def test_bad_input_exits_2_naming_the_fix(tmp_path, store, tiny_onnx, args, message):
    args = [a.format(onnx=tiny_onnx, tmp=tmp_path) for a in args]
    result = invoke(*args, "--store", store)
    assert result.exit_code == ExitCode.BAD_INPUT == 2, result.output
    assert re.search(message, flat(result)), result.output


@pytest.mark.slow
def test_tune_in_a_real_process_then_benchmark_its_run(tmp_path, store, tiny_onnx, check_verdict):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "simpletvm",
            "tune",
            str(tiny_onnx),
            "--minutes",
            "0.05",
            "--seed",
            "0",
            "--store",
            str(store),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    output = " ".join(done.stdout.split())
    run_id = re.search(r"run id (\w{32})", output).group(1)
    trials, tasks = map(int, re.search(r"(\d+) trials over (\d+) tasks", output).groups())
    assert trials >= tasks  # a 3-second budget still measures every task once, then stops
    lines = done.stdout.splitlines()
    # piped: plain progress lines as it goes (not one line at the end), each whole
    progress = [line for line in lines if line.startswith(f"tuning {tiny_onnx.name}: ")]
    assert len(progress) >= 4, done.stdout
    *progress, spent = progress  # the last line: where the time went
    assert re.fullmatch(r"tuning \S+: spent \d+:\d\d of the 0:03 budget: .+", spent), lines
    for line in progress[:-1]:
        assert re.fullmatch(
            r"tuning \S+: \d+ trials, (\d+ of \d+ tasks measured(, those sum "
            r"to [\d.]+ ms)?|estimate [\d.]+ ms.*?), (starting|.*(left of|over "
            r"the) \d+:\d\d( budget: .+)?(, ETA \d\d:\d\d:\d\d)?)",
            line,
        ), line
    assert re.fullmatch(
        rf"tuning \S+: {trials} trials, estimate [\d.]+ ms.*, \d+:\d\d "
        r"elapsed(, \d+:\d\d over the 0:03 budget: .+)?",
        progress[-1],
    ), lines
    # the command to run next on one line, whatever the terminal's width
    assert f"next     simpletvm compile {tiny_onnx} --records {run_id} -o DIR" in lines
    result = invoke("benchmark", run_id, "--rounds", "2", "--calls", "5", "--store", store)
    assert result.exit_code == 0, result.output
    text = flat(result)
    for name in ("untuned", f"tuned ({run_id})", "onnxruntime"):  # median, p10-p90, ratio
        assert re.search(re.escape(name) + r" [\d.]+ ms [\d.]+-[\d.]+ [\d.]+x tuned", text), text
    for name in ("untuned", f"tuned ({run_id})"):  # each build's error beside its latency
        found = re.search(
            re.escape(name) + r" [\d.]+ ms [\d.]+-[\d.]+ [\d.]+x tuned rel. error (\S+) vs "
            "onnxruntime",
            text,
        )
        assert found and float(found.group(1)) < 1e-5, text
    check_verdict(text, *printed_medians(text, "untuned", f"tuned ({run_id})"))


def test_an_unexpected_error_is_one_line_naming_the_runs_log(
    store, tiny_onnx, tmp_path, monkeypatch
):
    from simpletvm.api import SimpleTVM

    def build(self, records="global"):  # fails outside any step: SimpleTVM's own bug
        raise RuntimeError("boom inside TVM\nwith a second line")

    monkeypatch.setattr(SimpleTVM, "build", build)
    result = invoke("compile", tiny_onnx, "-o", tmp_path / "out", "--store", store)
    assert result.exit_code == ExitCode.UNEXPECTED == 3, result.output
    text = flat(result)
    assert "Traceback" not in result.output and "second line" not in text
    found = re.search(
        r"unexpected RuntimeError: boom inside TVM \(the full traceback is in "
        r"(\S+run\.log);",
        text,
    )
    assert found, text
    log = open(found.group(1)).read()
    assert "Traceback" in log and "boom inside TVM" in log and ", in build" in log


def test_an_unexpected_error_without_a_run_is_logged_under_the_store(store, monkeypatch):
    from simpletvm.store import RunStore

    def run_ids(self):
        raise KeyError("no such thing")

    monkeypatch.setattr(RunStore, "run_ids", run_ids)
    result = invoke("runs", "--store", store)
    assert result.exit_code == ExitCode.UNEXPECTED, result.output
    found = re.search(
        r"unexpected KeyError: 'no such thing' \(the full traceback is in "
        r"(\S+)\.log;",
        flat(result),
    )
    assert found, result.output
    path = found.group(1) + ".log"
    assert path.startswith(str(store / "errors")) and "Traceback" in open(path).read()


def test_a_step_failing_on_the_model_exits_1_naming_the_step(
    store, tiny_onnx, tmp_path, monkeypatch
):
    import simpletvm.compiler.build as build

    def compile_fused(*_args, **_kwargs):  # TVM gives up on the model inside the build step
        raise RuntimeError("cannot lower conv2d\nwith a second line")

    monkeypatch.setattr(build, "compile_fused", compile_fused)
    result = invoke(
        "compile", tiny_onnx, "--records", "none", "-o", tmp_path / "out", "--store", store
    )
    assert result.exit_code == ExitCode.FAILED == 1, result.output
    text = flat(result)
    assert "Traceback" not in result.output and "second line" not in text
    found = re.search(
        r"error: the build step failed on the model: RuntimeError: cannot lower "
        r"conv2d \(the full traceback is in (\S+run\.log)\)",
        text,
    )
    assert found, text
    assert "Traceback" in open(found.group(1)).read()


def test_tvms_frontend_failing_on_a_valid_model_exits_1_naming_the_operator(
    store, tmp_path, monkeypatch
):
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    from simpletvm.models.tflite_converter import Converter

    # TVM's own conversion of EXPAND_DIMS, which fails on every model
    monkeypatch.setattr(Converter, "convert_expand_dims", OperatorConverter.convert_expand_dims)
    path = make_expand_dims_tflite(tmp_path / "expand.tflite")
    result = invoke("compile", path, "--records", "none", "-o", tmp_path / "out", "--store", store)
    assert result.exit_code == ExitCode.FAILED == 1, result.output
    text = flat(result)
    found = re.search(
        r"error: the from_model step failed on the model: TVM's TFLite frontend failed on "
        r"operator EXPAND_DIMS \(output tensor 'y'\) of \S+expand\.tflite: TypeError: .*"
        r"not the model's.*\(the full traceback is in (\S+run\.log)\)",
        text,
    )
    assert found, text
    assert "Traceback" not in result.output and "builtin operators only" not in text
    log = open(found.group(1)).read()
    assert "in convert_expand_dims" in log and "BlockBuilder destroyed" in log


def test_ctrl_c_exits_130(store, monkeypatch):
    from simpletvm.store import RunStore

    def run_ids(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "run_ids", run_ids)
    result = invoke("runs", "--store", store)
    assert result.exit_code == ExitCode.INTERRUPTED == 130, result.output
    assert flat(result) == "interrupted"


def test_the_command_honours_ctrl_c_when_started_with_sigint_ignored():
    """Background shells and test runners start programs with SIGINT ignored; the entry
    point puts Python's KeyboardInterrupt back, so `kill -INT` still stops a command."""
    code = (
        "import signal, simpletvm.cli as cli; "
        "cli.app = lambda: print(signal.getsignal(signal.SIGINT) is "
        "signal.default_int_handler); cli.main()"
    )
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through fork and exec
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_a_sigint_handler_someone_installed_stays():
    def mine(*_):
        pass

    previous = signal.signal(signal.SIGINT, mine)
    try:
        honour_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is mine
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        honour_ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_importing_the_cli_loads_neither_tvm_nor_numpy():
    code = (
        "import sys, simpletvm.cli; print(sorted(m for m in sys.modules if "
        "m.split('.')[0] in ('tvm', 'tvm_ffi', 'tensorflow', 'numpy', 'pandas', 'onnx')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "untuned,tuned,verdict",
    [
        (1.26, 1.0, "tuning made it 1.26x faster than untuned"),
        (1.0, 1.26, "tuning made it 1.26x slower than untuned"),
        (0.79, 1.0, "tuning made it 1.27x slower than untuned"),  # never "0.79x faster"
        (1.0, 1.004, "tuning made it as fast as untuned"),  # 1.004x rounds to 1.00x
        (1.0, 1.0, "tuning made it as fast as untuned"),
    ],
)
def test_the_verdict_on_tuning_is_worded_by_its_direction(untuned, tuned, verdict):
    assert tuning_verdict(untuned, tuned) == verdict


def printed_medians(text: str, *names: str) -> list[float]:
    """The median latencies a benchmark printed for the named builds, as printed."""
    return [float(re.search(re.escape(name) + r" ([\d.]+) ms", text).group(1)) for name in names]


def test_benchmark_verdict_agrees_with_its_numbers_and_hints_print_whole(
    store, tiny_onnx, monkeypatch, check_verdict
):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # a plain install: no peer
    result = invoke("benchmark", tiny_onnx, "--rounds", "1", "--calls", "2", "--store", store)
    assert result.exit_code == 0, result.output
    text = flat(result)
    # Rich markup would take "[bench]" for a style and drop it
    assert (
        "(no onnxruntime timing: onnxruntime is not installed (pip install onnxruntime, or "
        "pip install 'simpletvm[bench]'))"
    ) in text
    # the same missing package leaves the answers unchecked, and says so
    assert "(answers not checked: onnxruntime is not installed (pip install" in text
    untuned, tuned = printed_medians(text, "untuned", "tuned (global)")
    check_verdict(text, untuned, tuned)
    assert re.search(rf"untuned [\d.]+ ms [\d.]+-[\d.]+ {untuned / tuned:.2f}x tuned", text), text


def test_verbose_keeps_native_log_lines_on_the_terminal(store, monkeypatch):
    from simpletvm._process.native_output import VERBOSE_VARIABLE, verbose

    monkeypatch.setenv(VERBOSE_VARIABLE, "0")  # restored after the test
    assert not verbose()
    result = invoke("--verbose", "runs", "--store", store)
    assert result.exit_code == 0, result.output
    assert verbose()


# ---- on the target device, through an RPC tracker --------------------------------------
@pytest.fixture(scope="module")
def rpc():
    with LocalRPC([KEY], servers=1) as local:
        yield local


def remote(rpc, key=KEY):
    host, port = rpc.address
    return ["--tracker", f"{host}:{port}", "--device-key", key]


def test_run_and_benchmark_on_an_rpc_server(rpc, tmp_path, store, tiny_onnx, x, check_verdict):
    module = tmp_path / "module"
    assert (
        invoke("compile", tiny_onnx, "--records", "none", "-o", module, "--store", store).exit_code
        == 0
    )
    result = invoke(
        "run", module, "-i", x, "-o", tmp_path / "y.npy", *remote(rpc), "--store", store
    )
    assert result.exit_code == 0, result.output
    server = rpc.server_handles[0].port
    assert re.search(rf"ran on RPC server [\d.]+:{server} \(key {KEY}\)", flat(result))
    session = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": np.load(x)})[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)

    result = invoke(
        "benchmark", tiny_onnx, "--rounds", "2", "--calls", "5", *remote(rpc), "--store", store
    )
    assert result.exit_code == 0, result.output
    text = flat(result)
    assert re.search(
        rf"median and p10-p90 of 10 runs on RPC server [\d.]+:{server} \(key {KEY}\)", text
    )
    for name in ("untuned", "tuned (global)"):  # the answers checked here, of the device's run
        assert re.search(
            re.escape(name) + r" [\d.]+ ms [\d.]+-[\d.]+ [\d.]+x tuned rel. error \S+ vs "
            "onnxruntime",
            text,
        ), text
    check_verdict(text, *printed_medians(text, "untuned", "tuned (global)"))
    assert not re.search(r"onnxruntime [\d.]+ ms", text)  # peers run here, not on the device


def test_a_tracker_without_a_server_of_the_key_exits_2_naming_the_fix(rpc, store, tiny_onnx):
    result = invoke("benchmark", tiny_onnx, *remote(rpc, "no-such-device"), "--store", store)
    assert result.exit_code == 2, result.output
    assert re.search(
        r"no RPC server with device key 'no-such-device' .* start one with "
        r"`python -m tvm.exec.rpc_server --tracker",
        flat(result),
    ), result.output


@pytest.mark.slow
def test_tune_profiles_on_the_trackers_server(rpc, store, tiny_onnx):
    import json

    result = invoke(
        "tune", tiny_onnx, "--total-trials", "6", "--seed", "0", *remote(rpc), "--store", store
    )
    assert result.exit_code == 0, result.output
    run_id = re.search(r"run id (\w{32})", flat(result)).group(1)
    context = json.loads((store / "runs" / run_id / "context.json").read_text())
    assert context["tuning"]["runner"] == "rpc" and context["tuning"]["device_key"] == KEY
    assert {s["resource"] for s in context["stages"] if s["stage"] == "profile"} == {
        f"device:{KEY}"
    }
