"""notebooks/superb_analysis.ipynb executed against a real, small superb sweep: it reads
the CSVs superb writes today, so the notebook cannot drift from their format.

One sweep of a tiny ONNX model (under a minute on 2 cores): two untuned runs, and two
runs that the scheduler tunes together (--jobs 2), so a trace CSV exists too; three
trials in all keep their tuning to two of the model's five tasks.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from ipykernel.kernelspec import write_kernel_spec
from nbclient import NotebookClient

from simpletvm.testing import tiny_cnn_onnx
from superb.results import STAGES, Experiment

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "superb_analysis.ipynb"
KERNEL = "superb-analysis-test"
# latency, stages, tuning curves, the closing round, and one Gantt chart per trace CSV
PLOTS_WITHOUT_TRACES = 4


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The sweep's environment (run store, experiment name) and its Experiment."""
    from typer.testing import CliRunner

    from superb.cli import app

    root = tmp_path_factory.mktemp("analysis")
    model = tiny_cnn_onnx(root / "tiny.onnx")
    grid = root / "grid.yaml"
    grid.write_text(
        textwrap.dedent(f"""
        name: analysed
        fixed: {{model: {model}, trials: 2, total_trials: 3, candidates_per_iteration: 2,
                 population: 16, genetic_iterations: 1, transfer_learning: false,
                 remeasure: 0, evaluate_repeat: 5, evaluate_warmup: 1}}
        grid:
          autotune: [false, true]
        repetitions: 2
    """)
    )
    env = {
        "SIMPLETVM_HOME": str(root / "store"),
        "SUPERB_EXPERIMENT": "analysed",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        result = CliRunner().invoke(
            app,
            ["run", str(grid), "--jobs", "2", "--plain", "--no-final-round"],
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.output
    experiment = Experiment(root / "store" / "superb" / "analysed")
    write_closing_round(experiment)
    return env, experiment


def write_closing_round(experiment: Experiment) -> None:
    """final.csv for the sweep's cells and an ONNX Runtime peer, with seeded samples in
    place of a closing round's (which the CLI's own tests time for real)."""
    import numpy as np

    from superb.final_round import FINAL_CSV, choose_cells, final_frame

    cells = choose_cells(experiment.read_runs(), peers=["onnxruntime"])
    rng = np.random.default_rng(0)
    rounds = [
        {
            "samples_ms": {cell.name: list(rng.lognormal(0, 0.05, 10)) for cell in cells},
            "outcomes": {cell.name: {"status": "ok"} for cell in cells},
            "provenance": {"host": "cpu", "llvm_cpu": "x", "threads": 2, "commit": "abc"},
            "load_before": 0.5,
            "load_after": 0.5,
        }
        for _ in range(3)
    ]
    final_frame(cells, rounds, 0).to_csv(experiment.dir / FINAL_CSV, index=False)


@pytest.mark.slow
def test_stages_and_curves_csvs_agree_with_runs_csv(swept):
    _, experiment = swept
    runs = pd.read_csv(experiment.runs_csv)
    assert list(runs["status"]) == ["ok"] * 4
    tuned = runs[runs["tuned"] == True].set_index("run")  # noqa: E712 - pandas
    assert len(tuned) == 2

    stages = pd.read_csv(experiment.stages_csv)
    assert set(stages["run"]) == set(tuned.index)
    for (run, stage), durations in stages.groupby(["run", "stage"])["duration_s"]:
        assert len(durations) == tuned.loc[run, f"{stage}_count"]
        assert durations.mean() == pytest.approx(tuned.loc[run, f"{stage}_mean_s"])
    assert set(stages["stage"]) == set(STAGES)
    assert (stages["end"] >= stages["start"]).all()

    curves = pd.read_csv(experiment.curves_csv)
    assert set(curves["run"]) == set(tuned.index)
    for run, curve in curves.groupby("run"):
        assert curve["trials"].is_monotonic_increasing
        assert curve["run_id"].eq(tuned.loc[run, "run_id"]).all()
        assert curve["trials"].iloc[-1] == tuned.loc[run, "trials"]
        assert curve["estimated_latency_ms"].iloc[-1] == pytest.approx(
            tuned.loc[run, "estimated_latency_ms"]
        )


@pytest.mark.slow
def test_notebook_plots_the_experiment(swept, tmp_path, monkeypatch):
    env, experiment = swept
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    # a kernel pinned to this interpreter: a user's own "python3" kernelspec may not be
    write_kernel_spec(tmp_path / "kernels" / KERNEL)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name=KERNEL,  # a cell's error raises
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()

    outputs = [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]
    images = [output for output in outputs if "image/png" in output.get("data", {})]
    traces = list(experiment.dir.glob("trace-*.csv"))
    assert len(traces) == 1
    assert len(images) == PLOTS_WITHOUT_TRACES + len(traces)
    printed = "".join(output.get("text", "") for output in outputs)
    assert "analysed: 4 runs, 4 ok" in printed


def test_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)
