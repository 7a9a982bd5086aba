"""What a newcomer sees of `simpletvm` (issue 39): shapes that cannot change, counts that
mean what they say, a run list worth reading, no native library chatter, one option
vocabulary, and a README whose Python runs as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simpletvm.cli import app
from simpletvm.exit_codes import ExitCode

README = Path(__file__).resolve().parents[2] / "README.md"
SCHEDULER_DOC = README.parent / "docs" / "scheduler.md"


def invoke(*args, input=None, env=None):  # noqa: A002 - CliRunner's name
    return CliRunner().invoke(app, [str(a) for a in args], input=input, env=env)


def flat(result) -> str:
    return " ".join(result.output.split())


def run_dirs(store) -> list[str]:
    runs = Path(store) / "runs"
    return sorted(p.name for p in runs.iterdir()) if runs.exists() else []


# ---- 1. --input-shape only fills unknown dimensions ---------------------------------------
def test_input_shape_cannot_change_a_fixed_dimension(store, tiny_onnx, tmp_path):
    result = invoke(
        "compile", tiny_onnx, "--input-shape", "1,3,16,16", "-o", tmp_path / "o", "--store", store
    )
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    text = flat(result)
    assert "[1, 3, 32, 32]" in text and "drop --input-shape" in text, text
    assert "give only the unknown dimensions" in text
    # the same value as the model's is no change: accepted
    same = invoke(
        "compile",
        tiny_onnx,
        "--input-shape",
        "1,3,32,32",
        "--records",
        "none",
        "-o",
        tmp_path / "o",
        "--store",
        store,
    )
    assert same.exit_code == 0, same.output


@pytest.mark.slow  # converts a Keras model to TFLite
def test_input_shape_on_a_tflite_file_is_checked_before_tvm_sees_it(tmp_path, keras_model):
    from simpletvm.models.tflite import keras_to_tflite

    path = tmp_path / "fixed.tflite"
    path.write_bytes(keras_to_tflite(keras_model))  # input fixed at 1x32x32x3
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "simpletvm",
            "compile",
            str(path),
            "--input-shape",
            "1,16,16,3",
            "-o",
            str(tmp_path / "o"),
            "--store",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == ExitCode.BAD_INPUT, output
    assert "[?, 32, 32, 3]" in output and "drop --input-shape" in output, output
    for stray in ("BlockBuilder", "T.int64", "channel size", "builtin operators", "ONNX"):
        assert stray not in output, output


# ---- 2. counts that mean what they say ----------------------------------------------------
def test_compile_counts_the_models_tasks_that_found_a_record(store, tiny_onnx, tmp_path):
    from simpletvm.tuning.records import RecordStore

    other_run = "f" * 32  # records of a workload the tiny model does not have
    records = RecordStore(store / "records.sqlite")
    record = ["trace", [0.001], {"kind": "llvm", "mcpu": "not-this-cpu"}, []]
    records.add("another-workload", {"mod": "none"}, [record], run_id=other_run)
    records.close()
    result = invoke(
        "compile", tiny_onnx, "--records", other_run, "-o", tmp_path / "o", "--store", store
    )
    assert result.exit_code == 0, result.output
    text = flat(result)
    assert "applied" not in text, text
    found = re.search(r"0 of (\d+) tasks tuned", text)
    assert found and int(found.group(1)) > 0, text
    assert re.search(
        r"warning: none of the model's \d+ tasks has a record in " + other_run, text
    ), text
    assert "another target or CPU" in text, text  # the one record is for another CPU
    untuned = invoke(
        "compile", tiny_onnx, "--records", "none", "-o", tmp_path / "o", "--store", store
    )
    assert untuned.exit_code == 0, untuned.output
    assert "untuned (no records)" in flat(untuned) and "none records" not in flat(untuned)


# ---- 3. a run store and run list worth reading --------------------------------------------
def test_only_commands_that_did_something_make_a_listed_run(store, tiny_onnx, tmp_path):
    module = tmp_path / "module"
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 32, 32), "float32"))
    assert (
        invoke("compile", tiny_onnx, "--records", "none", "-o", module, "--store", store).exit_code
        == 0
    )
    compiled = run_dirs(store)
    assert len(compiled) == 1
    assert invoke("run", module, "-i", x, "--store", store).exit_code == 0
    assert (
        invoke("compile", tmp_path / "missing.onnx", "-o", module, "--store", store).exit_code == 2
    )
    assert (
        invoke(
            "compile", tiny_onnx, "--records", "0" * 32, "-o", module, "--store", store
        ).exit_code
        == 2
    )
    assert run_dirs(store) == compiled  # run, and the refused commands, left no run

    (store / "runs" / ("e" * 32)).mkdir()  # a context used in Python, never saved
    listed = invoke("runs", "--store", store)
    assert listed.exit_code == 0, listed.output
    assert "e" * 32 not in listed.output and "1 that recorded nothing" in flat(listed)
    every = invoke("runs", "--all", "--store", store).output.splitlines()
    order = [next(i for i, line in enumerate(every) if r in line) for r in (compiled[0], "e" * 32)]
    assert order == sorted(order), every  # the runs that recorded something come first
    assert compiled[0] in listed.output  # the whole id, on one line, at 80 columns
    for column in ("run id", "kind", "status", "model", "latency", "date"):
        assert column in listed.output, listed.output
    row = next(line for line in listed.output.splitlines() if compiled[0] in line)
    assert "compile" in row and "ok" in row and "tiny.onnx" in row, listed.output

    data = json.loads(invoke("runs", "--json", "--store", store).output)
    assert [(r["run_id"], r["kind"], r["status"]) for r in data] == [(compiled[0], "compile", "ok")]


def test_runs_shows_failed_runs_and_prune_removes_them(store, tiny_onnx, tmp_path, monkeypatch):
    import simpletvm.compiler.build as build

    def compile_fused(*_args, **_kwargs):
        raise RuntimeError("cannot lower conv2d")

    with monkeypatch.context() as patch:
        patch.setattr(build, "compile_fused", compile_fused)
        assert (
            invoke(
                "compile", tiny_onnx, "--records", "none", "-o", tmp_path / "o", "--store", store
            ).exit_code
            == ExitCode.FAILED
        )
    (store / "runs" / ("e" * 32)).mkdir(parents=True)  # a run that never wrote anything
    assert (
        invoke(
            "compile", tiny_onnx, "--records", "none", "-o", tmp_path / "o", "--store", store
        ).exit_code
        == 0
    )
    (failed,) = [
        r
        for r in json.loads(invoke("runs", "--json", "--store", store).output)
        if r["status"] == "failed"
    ]
    assert failed["kind"] == "compile"

    kept = invoke("runs", "--prune", "--store", store, input="n\n")
    assert kept.exit_code == 0 and len(run_dirs(store)) == 3, kept.output
    assert "removed none" in kept.output
    pruned = invoke("runs", "--prune", "--yes", "--store", store)
    assert pruned.exit_code == 0, pruned.output
    assert failed["run_id"] in pruned.output and "e" * 32 in pruned.output
    left = run_dirs(store)
    assert (
        len(left) == 1
        and json.loads(invoke("runs", "--json", "--store", store).output)[0]["status"] == "ok"
    )


def test_a_benchmark_run_is_listed_with_its_tuned_median(store, tiny_onnx, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # no peer: a faster test
    result = invoke("benchmark", tiny_onnx, "--rounds", "1", "--calls", "2", "--store", store)
    assert result.exit_code == 0, result.output
    tuned = float(re.search(r"tuned \(global\) +([\d.]+) ms", flat(result)).group(1))
    (row,) = json.loads(invoke("runs", "--json", "--store", store).output)
    assert (row["kind"], row["status"]) == ("benchmark", "ok")
    # the same median, stored whole and printed to four significant digits
    assert row["latency_ms"] == pytest.approx(tuned, rel=1e-3)
    assert re.search(
        r"benchmark +ok +tiny\.onnx +[\d.]+ ms", invoke("runs", "--store", store).output
    )


# ---- 4. native library output stays out of the terminal ----------------------------------
@pytest.mark.slow  # converts a Keras model to TFLite; TFLite and TensorFlow then run
def test_benchmark_keeps_native_library_lines_out_of_the_terminal(tmp_path, keras_model):
    from simpletvm.models.tflite import keras_to_tflite

    path = tmp_path / "m.tflite"
    path.write_bytes(keras_to_tflite(keras_model))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CPP_MIN_LOG_LEVEL", "SIMPLETVM_VERBOSE")
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "simpletvm",
            "benchmark",
            str(path),
            "--rounds",
            "1",
            "--calls",
            "2",
            "--store",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ("absl::InitializeLog", "I0000", "XNNPACK delegate", "oneDNN"):
        assert line not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "untuned" in done.stdout


def test_a_failed_import_keeps_its_log_and_its_native_lines_off_the_terminal(
    store, tiny_onnx, monkeypatch, capfd
):
    """A converter that gives up leaves TVM objects whose destructors print
    (``BlockBuilder destroyed with remaining blocks!``): they are freed while the native
    output is caught, and the run stays, failed, its log holding them and the traceback."""
    import simpletvm.models.onnx as onnx_importer
    from simpletvm.errors import ModelImportError

    def gives_up(*_args, **_kwargs):
        from tvm import relax

        builder = relax.BlockBuilder()
        builder._begin_dataflow_block()  # left open, as a frontend that fails midway leaves it
        raise ModelImportError(f"TVM's ONNX frontend cannot import {tiny_onnx}: it gave up")

    monkeypatch.setattr(onnx_importer, "import_onnx_file", gives_up)
    result = invoke("compile", tiny_onnx, "-o", store.parent / "o", "--store", store)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    terminal = result.output + "".join(capfd.readouterr())
    assert "BlockBuilder" not in terminal and "it gave up" in terminal, terminal
    (run_id,) = run_dirs(store)
    log = store / "runs" / run_id / "run.log"
    assert str(log) in flat(result)
    text = log.read_text()
    assert "BlockBuilder destroyed with remaining blocks" in text and "Traceback" in text, text
    (row,) = json.loads(invoke("runs", "--json", "--store", store).output)
    assert (row["run_id"], row["status"]) == (run_id, "failed")


# ---- 5. the smaller things ----------------------------------------------------------------
def test_help_shows_flags_without_a_type_and_the_model_as_MODEL():
    for command in ([], ["tune"], ["compile"], ["benchmark"], ["runs"]):
        result = invoke(*command, "--help", env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output and "BOOLEAN" not in result.output, result.output
        assert "{model}" not in result.output
    assert "MODEL" in invoke("tune", "--help").output


def test_verbose_has_one_meaning_and_tune_logs_tasks_with_log_tasks():
    text = invoke("tune", "--help", env={"COLUMNS": "200"}).output
    assert "--log-tasks" in text and "--verbose" not in text, text


@pytest.mark.parametrize("command", ["quickstart", "tune"])
def test_one_minutes_limit(store, command):
    args = [command] + (["missing.onnx"] if command == "tune" else []) + ["--minutes", "0.005"]
    result = invoke(*args, "--store", store)
    assert result.exit_code == 2 and "0.01" in flat(result), result.output


@pytest.mark.parametrize("command", ["tune", "compile", "run", "benchmark"])
def test_threads_on_every_command(command):
    assert "--threads" in invoke(command, "--help", env={"COLUMNS": "200"}).output


def test_compile_with_threads_pins_them(store, tiny_onnx, tmp_path):
    result = invoke(
        "compile",
        tiny_onnx,
        "--records",
        "none",
        "--threads",
        "1",
        "-o",
        tmp_path / "o",
        "--store",
        store,
    )
    assert result.exit_code == 0, result.output
    (run_id,) = run_dirs(store)
    assert json.loads((store / "runs" / run_id / "context.json").read_text())["num_threads"] == 1


@pytest.fixture(scope="module")
def untuned_module(tiny_onnx, tmp_path_factory) -> Path:
    """The tiny model compiled untuned, for the tests that run it with inputs it refuses
    (a refused input reaches no kernel, so nothing is written beside the module)."""
    directory = tmp_path_factory.mktemp("untuned")
    module, store = directory / "module", directory / "store"
    done = invoke("compile", tiny_onnx, "--records", "none", "-o", module, "--store", store)
    assert done.exit_code == 0, done.output
    return module


def test_run_refuses_an_input_of_another_dtype_naming_the_fix(store, untuned_module, tmp_path):
    module = untuned_module
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 32, 32)))  # numpy's default: float64
    result = invoke("run", module, "-i", x, "-o", tmp_path / "y.npy", "--store", store)
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert f"{x} holds float64, the model's input 'x' takes float32" in flat(result)
    assert "astype('float32')" in flat(result) and not (tmp_path / "y.npy").exists()


def test_the_command_list_gives_each_command_one_line():
    """Typer keeps a docstring's line breaks: the list shows each command's first
    paragraph, a one-line summary, whole at 80 columns."""
    text = invoke("--help", env={"COLUMNS": "80"}).output
    panel = [line for line in text[text.index("Commands") :].splitlines() if line.startswith("│")]
    assert len(panel) >= 6 and all(re.match(r"│ [a-z]+ +\S", line) for line in panel), text


def test_run_names_bad_input_files_and_unknown_input_names(
    store, tiny_onnx, untuned_module, tmp_path
):
    module = untuned_module
    result = invoke("run", module, "-i", tiny_onnx, "--store", store)
    assert result.exit_code == 2, result.output
    text = flat(result)
    assert "allow_pickle" not in text and "not a .npy array" in text and "numpy.save" in text
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 32, 32), "float32"))
    result = invoke("run", module, "-i", f"foo={x}", "--store", store)
    assert result.exit_code == 2, result.output
    assert "unknown input 'foo'" in flat(result) and "['x']" in flat(result), result.output


def test_compile_lists_none_among_the_record_choices(store, tiny_onnx, tmp_path):
    result = invoke(
        "compile", tiny_onnx, "--records", "deadbeef", "-o", tmp_path / "o", "--store", store
    )
    assert result.exit_code == 2
    assert "or none" in flat(result) and "None" not in flat(result), result.output


def test_image_size_on_a_model_file_names_the_option(store, tiny_onnx, tmp_path):
    result = invoke(
        "compile", tiny_onnx, "--image-size", "32", "-o", tmp_path / "o", "--store", store
    )
    assert result.exit_code == 2, result.output
    text = flat(result)
    assert "--image-size" in text and "built-in models only" in text, text
    assert "image_size" not in text.replace("--image-size", "")


def test_the_example_grids_task_count_is_true():
    text = (Path(__file__).resolve().parents[2] / "examples" / "superb_mobilenet.yaml").read_text()
    assert "38 tasks" not in text


# ---- 6. the README's Python runs as written ------------------------------------------------
@pytest.mark.slow  # tunes
def test_the_readmes_python_examples_run(tmp_path):
    """Every ```python block of README.md and docs/scheduler.md, as written but for the
    first example's size: its 2-minute budget becomes 3 seconds and its 96x96 images
    32x32 (the same code path, less to compile and time). The store is a fresh one ($SIMPLETVM_HOME); the
    scheduler example's a.onnx and b.onnx are tiny models."""
    from simpletvm.testing import tiny_cnn_onnx

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1, "a new README example: give it its files here"
    (first,) = blocks
    (scheduler,) = re.findall(r"```python\n(.*?)```", SCHEDULER_DOC.read_text(), re.S)
    assert "minutes=2" in first
    assert first.count("96") == 3  # image_size=96 and the image's (1, 96, 96, 3)
    first = first.replace("minutes=2", "minutes=0.05").replace("96", "32")
    for name in ("a.onnx", "b.onnx"):
        tiny_cnn_onnx(tmp_path / name)
    env = {**os.environ, "SIMPLETVM_HOME": str(tmp_path / "store")}
    for block in (first, scheduler):
        done = subprocess.run(
            [sys.executable, "-c", block],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=tmp_path,
        )
        assert done.returncode == 0, block + done.stdout + done.stderr
        if block is first:
            assert re.search(r"\d+ trials, [\d.]+ ms median", done.stdout), done.stdout
            assert "(1, 1000)" in done.stdout, done.stdout
    assert (tmp_path / "gantt.png").exists()


# ---- 7. one option vocabulary for both CLIs -----------------------------------------------
def test_both_clis_share_option_names_and_limits():
    """--store means one thing in both; --minutes, --threads and --verbose are simpletvm's
    (a grid sets minutes and num_threads per run, minutes bounded as --minutes is)."""
    from simpletvm.cli_options import MIN_MINUTES, STORE_HELP
    from superb.cli import app as superb_app
    from superb.parameters import PARAMETERS, check_value

    assert MIN_MINUTES == 0.01
    assert "at least 0.01" in check_value(PARAMETERS["minutes"], 0.005)
    assert check_value(PARAMETERS["minutes"], 0.01) is None
    wide = {"COLUMNS": "400"}

    def words(text: str) -> str:  # the help wrapped anywhere, boxed or not
        return "".join(text.replace("│", "").split())

    superb_help = CliRunner().invoke(superb_app, ["run", "--help"], env=wide).output
    assert words(STORE_HELP) in words(superb_help), superb_help
    assert "{grid}" not in superb_help and "GRID" in superb_help
    for command in ("quickstart", "tune", "compile", "run", "benchmark", "runs"):
        text = invoke(command, "--help", env=wide).output
        assert words(STORE_HELP) in words(text), (command, text)
