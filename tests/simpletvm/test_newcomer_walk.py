"""A newcomer's first hour, scripted: a small Keras CNN the test makes, the README's
commands typed as a user types them (``python -m simpletvm ...``, ``python -m superb
...``, in a pipe), and a few lines of the Python API; each test checks one thing that
cost such a user time or trust: a budget that is not the wait, estimates and ETAs that
move the wrong way unexplained, a run list full of nothing, native lines on the
terminal, a wrong dtype taken silently, a benchmark without peers or spread, a slower
tuned row unflagged, ratios without a direction."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # tunes for a minute, converts Keras to TFLite, runs superb

README = Path(__file__).resolve().parents[2] / "README.md"
BUDGET_S = 60.0
# what a native library writes past Python: a C++ file and line (TVM's warnings), glog's
# and absl's prefixes (TensorFlow), TFLite's delegate, oneDNN's notice
NATIVE = re.compile(r"\.(cc|cpp|h):\d+\]?|^[IWEF]\d{4} |absl::|XNNPACK|oneDNN|BlockBuilder", re.M)
GRID = """\
name: walk
fixed: {model: small.keras, trials: 2, transfer_learning: false, evaluate_repeat: 20}
grid:
  autotune: [false, true]
"""


class Walk:
    """The commands typed, in order, each kept as it ended (``done[name]``)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.store = directory / "store"
        self.done: dict[str, subprocess.CompletedProcess] = {}
        # a user's shell: no test-runner settings that quiet the native libraries
        quiet = ("TF_CPP_MIN_LOG_LEVEL", "SIMPLETVM_VERBOSE", "SIMPLETVM_HOME")
        self.env = {k: v for k, v in os.environ.items() if k not in quiet}
        self.env["COLUMNS"] = "100"

    def type(self, name: str, *args, program: str = "simpletvm", columns: int = 100):
        done = subprocess.run(
            [sys.executable, "-m", program, *[str(a) for a in args]],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=self.dir,
            env={**self.env, "COLUMNS": str(columns)},
        )
        self.done[name] = done
        return done

    def python(self, name: str, code: str):
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=self.dir,
            env={**self.env, "SIMPLETVM_HOME": str(self.store)},
        )
        self.done[name] = done
        return done

    def out(self, name: str) -> str:
        return self.done[name].stdout

    def context(self, run_id: str) -> dict:
        return json.loads((self.store / "runs" / run_id / "context.json").read_text())


@pytest.fixture(scope="module")
def walk(tmp_path_factory, keras_model):
    w = Walk(tmp_path_factory.mktemp("walk"))
    keras_model.save(w.dir / "small.keras")
    store = ["--store", w.store]
    w.type("help", "--help", columns=80)
    tune = w.type("tune", "tune", "small.keras", "--minutes", BUDGET_S / 60, *store)
    assert tune.returncode == 0, tune.stdout + tune.stderr
    w.run_id = re.search(r"run id +(\w{32})", tune.stdout).group(1)
    compiled = w.type(
        "compile", "compile", "small.keras", "--records", w.run_id, "-o", "module", *store
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    np.save(w.dir / "x64.npy", np.random.default_rng(0).standard_normal((1, 32, 32, 3)))
    np.save(w.dir / "x32.npy", np.load(w.dir / "x64.npy").astype("float32"))
    w.type("run64", "run", "module", "-i", "x64.npy", "-o", "y64.npy", *store)
    w.type("run32", "run", "module", "-i", "x32.npy", "-o", "y32.npy", *store)
    # the Python API as a user tries it: contexts made to load the module, never saved
    w.python(
        "python",
        "import numpy as np\n"
        "from simpletvm import BenchmarkingContext, SimpleTVM\n"
        "module = None\n"
        "for _ in range(2):\n"
        "    module = SimpleTVM(BenchmarkingContext('cpu')).load('x', directory='module')\n"
        "try:\n"
        "    module.run(np.load('x64.npy'))\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n",
    )
    w.type("benchmark", "benchmark", w.run_id, "--rounds", "2", "--calls", "5", *store)
    w.type("runs", "runs", *store)
    w.type("runs --all", "runs", "--all", *store)
    (w.dir / "grid.yaml").write_text(GRID)
    w.type("superb run", "run", "grid.yaml", *store, program="superb")
    w.type("superb report", "report", "walk", *store, program="superb", columns=200)
    return w


def test_the_budget_covers_the_wait_and_says_so_first(walk):
    """``tune --minutes 1``: before anything runs it says what the budget covers (all of
    tuning, the round inside the model included) and what it leaves out (the import);
    at the end, where the time went. Rather than race the wall clock (a loaded host
    stretches the import and the interpreter's start, which the budget does not claim),
    the test holds the run to its own record: the steps after the import follow it at
    once and span what the budget's account says, and that span is within 25% of the
    budget, or the progress said why it ran over."""
    lines = walk.out("tune").splitlines()
    budget = next(i for i, line in enumerate(lines) if line.startswith("budget "))
    first = next(i for i, line in enumerate(lines) if line.startswith("tuning small.keras: "))
    assert budget < first, lines
    assert re.search(r"1:00 of tuning from the end of the import \(not counted\)", lines[budget])
    assert "the timing inside the model" in lines[budget]
    context = walk.context(walk.run_id)
    steps = {step["step"]: step for step in context["steps"]}
    assert set(steps) == {"from_model", "autotune", "in_model"}
    assert steps["autotune"]["start"] - steps["from_model"]["end"] < 1.0
    span = steps["in_model"]["end"] - steps["autotune"]["start"]
    spent = context["tuning"]["spent_s"]
    assert sum(spent.values()) == pytest.approx(span, abs=1.0), spent
    assert spent["in_model"] == pytest.approx(steps["in_model"]["duration_s"])
    said = re.search(
        r"spent (\d+):(\d\d) of the 1:00 budget: .*timing inside the model", walk.out("tune")
    )
    assert said and abs(int(said[1]) * 60 + int(said[2]) - span) <= 1, walk.out("tune")
    overran = re.search(r"over the 1:00 budget: \w+", walk.out("tune"))
    assert span <= 1.25 * BUDGET_S or overran, (span, walk.out("tune"))


def test_estimates_never_rise_unlabelled_and_the_eta_never_moves_earlier(walk):
    """A partial sum says so ("those sum to"), the round inside the model says it timed
    the whole model; the search's own estimate only falls; the ETA only moves later."""
    lines = [line for line in walk.out("tune").splitlines() if line.startswith("tuning ")]
    estimates = []
    for line in lines:
        figures = re.findall(r"([\d.]+) ms", line)
        labelled = re.search(r"those sum to|estimate [\d.]+ ms|the model as a whole", line)
        assert not figures or labelled, line
        found = re.search(r"\bestimate ([\d.]+) ms", line)
        if found:
            estimates.append(float(found[1]))
    assert estimates and estimates == sorted(estimates, reverse=True), lines
    assert any("those sum to" in line for line in lines)
    assert any("the model as a whole" in line for line in lines)
    etas = re.findall(r"ETA (\d\d:\d\d:\d\d)", walk.out("tune"))
    assert etas and etas == sorted(etas), etas


def test_runs_lists_what_recorded_something(walk):
    listed = walk.out("runs")
    assert walk.run_id in listed and "empty" not in listed, listed
    assert re.search(r"not listed: 2 that recorded nothing", " ".join(listed.split())), listed
    every = walk.out("runs --all").splitlines()
    kept = [i for i, line in enumerate(every) if re.search(r"\b(tune|compile)\b", line)]
    empty = [i for i, line in enumerate(every) if " empty" in line]
    assert len(empty) == 2 and max(kept) < min(empty), every


def test_no_native_line_reaches_the_terminal(walk):
    for name, done in walk.done.items():
        found = NATIVE.search(done.stdout + done.stderr)
        assert found is None, (name, found and found.group(0), done.stdout + done.stderr)


def test_an_input_of_another_dtype_is_refused_naming_the_one_expected(walk):
    refused = walk.done["run64"]
    assert refused.returncode == 2, refused.stdout + refused.stderr
    message = " ".join((refused.stdout + refused.stderr).split())
    assert re.search(r"x64\.npy holds float64, the model's input '\S+' takes float32", message)
    assert not (walk.dir / "y64.npy").exists()
    assert walk.done["run32"].returncode == 0 and (walk.dir / "y32.npy").exists()
    python = walk.done["python"]
    assert re.search(r"refused: input '\S+' must be float32, got float64", python.stdout), python


def test_benchmark_shows_peers_and_a_spread_in_aligned_columns(walk):
    done = walk.done["benchmark"]
    assert done.returncode == 0, done.stdout + done.stderr
    names = ("untuned", f"tuned ({walk.run_id})", "keras", "tflite")
    rows = [
        next(line for line in done.stdout.splitlines() if line.strip().startswith(n + " "))
        for n in names
    ]
    for row in rows:  # the median, then p10-p90, then the ratio to tuned
        assert re.search(r" [\d.]+ ms +[\d.]+-[\d.]+ +[\d.]+x tuned", row), row
    for column in (" ms ", "x tuned"):
        assert len({row.index(column) for row in rows}) == 1, rows
    assert "below 1: faster" in done.stdout


def test_the_superb_report_gives_the_speed_up_and_flags_a_slower_tuned_row(walk):
    from superb.report import make_report
    from superb.results import Experiment

    assert walk.done["superb run"].returncode == 0, walk.out("superb run")
    report = walk.out("superb report")
    assert "speed-up" in report and "below 1: tuning made it slower" in report, report
    frame = make_report(Experiment.find("walk", walk.store)).aggregate
    tuned = frame[frame["param:autotune"].astype(str) == "True"].iloc[0]
    untuned = frame[frame["param:autotune"].astype(str) == "False"].iloc[0]
    assert tuned["speedup"] == pytest.approx(untuned["eval_median_ms"] / tuned["eval_median_ms"])
    assert tuned["flag"].startswith("slower") == (tuned["speedup"] < 1), tuned
    assert f"{tuned['speedup']:.4g}" in report


def test_help_lines_and_ratios_say_what_they_mean(walk):
    text = walk.out("help")
    panel = [line for line in text[text.index("Commands") :].splitlines() if line.startswith("│")]
    assert all(re.match(r"│ [a-z]+ +\S", line) for line in panel), text  # none wrapped
    readme = README.read_text()
    assert "SimpleTVM / fastest peer (below 1: SimpleTVM faster)" in readme
    assert "x tuned: over the tuned median (below 1: faster)" in walk.out("benchmark")
