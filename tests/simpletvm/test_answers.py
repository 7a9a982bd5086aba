"""A build's answers against the framework its model came from, on evaluate()'s seeded
inputs (check_answers(), and evaluate() before it times): the worst relative error, who
computed the reference and the tolerance; a build further off than that is refused."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import numpy as np
import pytest

from simpletvm import BenchmarkingContext, SimpleTVM, WrongAnswerError
from simpletvm.closeness import TOLERANCE
from simpletvm.runtime import reference
from simpletvm.runtime.evaluation import random_inputs


def untuned(store, source) -> SimpleTVM:
    return SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(source).build(records=None)


def test_evaluate_reports_the_error_against_onnxruntime(store, tiny_onnx):
    stvm = untuned(store, tiny_onnx)
    stats = stvm.evaluate(repeat=2, warmup=0).last_evaluation
    assert stats["reference"] == "onnxruntime" and stats["tolerance"] == TOLERANCE["float32"]
    assert 0 <= stats["max_rel_error"] < TOLERANCE["float32"] / 100
    assert stats["count"] == 2  # and timed, as before
    assert stvm.context.evaluation == stats
    # the same inputs (the seed's), the same answer
    assert stvm.check_answers(seed=0) == {
        key: stats[key] for key in ("max_rel_error", "reference", "tolerance")
    }


@pytest.mark.slow
def test_evaluate_reports_a_small_error_against_keras(store, keras_model):
    stats = untuned(store, keras_model).evaluate(repeat=1, warmup=0).last_evaluation
    assert stats["reference"] == "keras"
    assert 0 <= stats["max_rel_error"] < TOLERANCE["float32"] / 100


def test_a_wrong_build_is_refused_naming_the_output_the_error_and_the_tolerance(
    store, tiny_onnx, source_off_by
):
    source_off_by(0.05)  # the module's outputs now 0.05 / 1.05 away from the source's
    stvm = untuned(store, tiny_onnx)
    with pytest.raises(WrongAnswerError) as refused:
        stvm.evaluate(repeat=2, warmup=0)
    message = str(refused.value)
    assert "output 'y' is 4.76e-02 away from onnxruntime's" in message
    assert "float32 tolerance 1.00e-03" in message
    assert "build(records=None)" in message and "evaluate(tolerance=...)" in message
    recorded = stvm.context.evaluation
    assert recorded["max_rel_error"] == pytest.approx(0.05 / 1.05, rel=1e-4)
    assert "median_ms" not in recorded  # refused before it was timed
    assert stvm.context.steps[-1]["step"] == "evaluate"
    assert stvm.context.steps[-1]["status"] == "error"
    # the user's tolerance, when the difference is one they accept
    stats = stvm.evaluate(repeat=2, warmup=0, tolerance=0.1).last_evaluation
    assert stats["tolerance"] == 0.1 and stats["count"] == 2


@pytest.mark.parametrize("tolerance", [0, -1e-3, math.nan])
def test_a_tolerance_that_is_no_relative_error_is_refused(store, tiny_onnx, tolerance):
    stvm = untuned(store, tiny_onnx)
    with pytest.raises(ValueError, match="not a relative error: give a positive number"):
        stvm.evaluate(repeat=1, tolerance=tolerance)


def test_without_onnxruntime_the_reference_says_so(store, tiny_onnx, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # a plain install: not there
    stats = untuned(store, tiny_onnx).evaluate(repeat=2, warmup=0).last_evaluation
    assert stats["reference"].startswith("none: onnxruntime is not installed (pip install")
    assert stats["max_rel_error"] is None and stats["tolerance"] is None
    assert stats["count"] == 2  # the timing does not depend on it


def test_a_loaded_module_says_it_has_no_source(store, tiny_onnx):
    saved = untuned(store, tiny_onnx).save()
    loaded = SimpleTVM(BenchmarkingContext("cpu", store=store)).load(saved.context.run_id)
    answers = loaded.check_answers()
    assert answers["max_rel_error"] is None
    assert answers["reference"].startswith("none: a module loaded from its saved files")


def test_the_source_runs_once_per_seed(store, tiny_onnx, monkeypatch):
    inputs_seen = []
    found = reference.reference_for

    def counted(model):
        source = found(model)

        def run(arrays):
            inputs_seen.append(arrays)
            return source.run(arrays)

        return replace(source, run=run)

    monkeypatch.setattr(reference, "reference_for", counted)
    stvm = untuned(store, tiny_onnx)
    stvm.evaluate(repeat=1, warmup=0)
    stvm.build(records=None).evaluate(repeat=1, warmup=0)  # built again, the same model
    assert len(inputs_seen) == 1
    stvm.check_answers(seed=1)
    assert len(inputs_seen) == 2
    np.testing.assert_array_equal(inputs_seen[1][0], random_inputs(stvm.model.inputs, 1)[0])
