"""Contested layers tuned in two forms, built in the faster: which layers are contested,
the tasks each form adds, the choice by measured latency, and the built model's output.

Models are built with Relax's BlockBuilder (no TensorFlow); weights from seeded rngs.
"""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from simpletvm.compiler.build import compile_fused
from simpletvm.compiler.conv_forms import ConvForms
from simpletvm.compiler.lowering import extract_tasks
from simpletvm.compiler.winograd import ConvSignature, forms_for
from simpletvm.targets import resolve_target


def two_layer_model(seed: int = 0):
    """conv3x3 16->16 at 28x28 (not contested) -> stride-2 pool -> conv3x3 16->16 at
    14x14 (F(4,3) gives 16 tiles: contested with F(2,3)), each with ReLU."""
    from tvm import relax

    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal((3, 3, 16, 16)).astype("float32") / 12 for _ in range(2)]
    x = relax.Var("x", relax.TensorType((1, 28, 28, 16), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(
                relax.op.nn.relu(
                    relax.op.nn.conv2d(
                        x,
                        relax.const(weights[0]),
                        padding=1,
                        data_layout="NHWC",
                        kernel_layout="HWIO",
                    )
                )
            )
            y = bb.emit(relax.op.nn.max_pool2d(y, 2, 2, layout="NHWC"))
            y = bb.emit(
                relax.op.nn.relu(
                    relax.op.nn.conv2d(
                        y,
                        relax.const(weights[1]),
                        padding=1,
                        data_layout="NHWC",
                        kernel_layout="HWIO",
                    )
                )
            )
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get(), weights


def reference(x, weights):
    def conv_relu(h, w):
        padded = np.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0)))
        out = np.zeros(h.shape[:3] + (w.shape[3],), dtype="float64")
        for i in range(3):
            for j in range(3):
                out += padded[:, i : i + h.shape[1], j : j + h.shape[2], :] @ w[i, j]
        return np.maximum(out, 0)

    h = conv_relu(x, weights[0])
    h = h.reshape(1, 14, 2, 14, 2, 16).max(axis=(2, 4))
    return conv_relu(h, weights[1])


@pytest.mark.parametrize(
    "size, forms",
    [
        (56, (4,)),
        (28, (4,)),  # many tiles: F(4,3) only
        (14, (4, 2)),  # 16 tiles of 4x4: F(2,3) measured too
        (12, (2, None)),  # 36 tiles of 2x2: direct measured too
        (7, (None,)),
        (3, (None,)),  # too few tiles for any Winograd form
    ],
)
def test_layers_with_few_tiles_are_tuned_in_the_next_smaller_form_too(size, forms):
    assert forms_for(size, size) == forms


def test_the_contested_layer_gets_a_variant_whose_tasks_rival_the_default_ones():
    mod, _ = two_layer_model()
    forms = ConvForms(mod, resolve_target("cpu"))
    assert forms.contested == {ConvSignature((1, 14, 14, 16), 16, (1, 1, 1, 1)): (4, 2)}
    assert len(forms.modules()) == 2
    [rivalry] = forms.rivalries
    assert (rivalry.default_form, rivalry.form) == (4, 2)
    [default_task] = rivalry.default_tasks.values()
    [variant_task] = rivalry.variant_tasks.values()
    assert "winograd_f4" in default_task.task_name
    assert "winograd_f2" in variant_task.task_name
    names = [t.task_name for t in extract_tasks(forms.modules(), resolve_target("cpu"))]
    assert len(names) == len(extract_tasks(forms.default, resolve_target("cpu"))) + 1
    assert sum("winograd_f2" in name for name in names) == 1


def chosen_form(forms: ConvForms, latency_by_form):
    """choose() with each task's latency given by its Winograd form in its name."""

    def latency_s(task):
        for form, latency in latency_by_form.items():
            if form in task.task_name:
                return latency
        return 1e-4  # the layers that are not contested

    return forms.choose(latency_s)


def test_build_takes_the_form_that_measured_faster():
    mod, _ = two_layer_model()
    forms = ConvForms(mod, resolve_target("cpu"))
    module, [choice] = chosen_form(forms, {"winograd_f4": 3e-4, "winograd_f2": 2e-4})
    assert choice.chosen == 2 and choice.estimate_ms == {"F(4,3)": 0.3, "F(2,3)": 0.2}
    names = [t.task_name for t in extract_tasks(module, resolve_target("cpu"))]
    assert sum("winograd_f2" in n for n in names) == 1
    assert sum("winograd_f4" in n for n in names) == 1  # the 28x28 layer keeps F(4,3)
    module, [choice] = chosen_form(forms, {"winograd_f4": 2e-4, "winograd_f2": 3e-4})
    assert choice.chosen == 4 and module is forms.default


def test_a_form_not_measured_is_not_chosen():
    mod, _ = two_layer_model()
    forms = ConvForms(mod, resolve_target("cpu"))
    module, [choice] = chosen_form(forms, {"winograd_f4": 3e-4, "winograd_f2": None})
    assert choice.chosen == 4 and module is forms.default
    assert choice.describe() == {
        "layer": "3x3 16->16 at 14x14",
        "form": "F(4,3)",
        "estimate_ms": {"F(4,3)": 0.3, "F(2,3)": None},
    }


def test_without_winograd_nothing_is_contested():
    mod, _ = two_layer_model()
    forms = ConvForms(mod, resolve_target("cpu"), winograd=False)
    assert forms.contested == {} and forms.modules() == [forms.default]


def fake_tuned(tmp_path):
    """The two-layer model's forms, tuned with the fake builder and runner (random
    latencies), records in a real store: the forms, the job and the store."""
    from simpletvm.testing import fake_builder, fake_runner
    from simpletvm.tuning.job import TuningJob
    from simpletvm.tuning.options import TuningOptions
    from simpletvm.tuning.records import RecordStore

    forms = ConvForms(two_layer_model()[0], resolve_target("cpu"))
    records = RecordStore(tmp_path / "records.sqlite")
    job = TuningJob(
        forms,
        resolve_target("cpu"),
        TuningOptions(trials=4, candidates_per_iteration=2, population=8),
        records=records,
        builder=fake_builder(),
        runner=fake_runner(seed=3),
        run_id="forms",
    )
    job.run()
    return forms, job, records


def test_a_tuned_job_builds_each_layer_in_the_form_its_records_favour(tmp_path):
    """Tuning with the fake builder and runner (random latencies), records in a real
    store: the job measures both forms, the plan's estimate counts the faster, and the
    model built with the records computes the same numbers as numpy."""
    import tvm
    from tvm import relax

    from simpletvm.tuning.database import RecordDatabase, best_latency_s

    target = resolve_target("cpu")
    _, weights = two_layer_model()
    forms, job, records = fake_tuned(tmp_path)
    [rivalry] = forms.rivalries
    assert len(job.tasks) == len(extract_tasks(forms.default, target)) + 1
    database = RecordDatabase(records, target.tvm_target(), scope="run", run_id="forms")
    latency = {
        key: best_latency_s(database, task)
        for key, task in [*rivalry.default_tasks.items(), *rivalry.variant_tasks.items()]
    }
    assert all(latency.values())
    module, [choice] = forms.choose(lambda task: best_latency_s(database, task))
    (default_s,) = (latency[k] for k in rivalry.default_tasks)
    (variant_s,) = (latency[k] for k in rivalry.variant_tasks)
    assert choice.chosen == (2 if variant_s < default_s else 4)
    summary = job.summary()
    [(loser_key, loser)] = (
        rivalry.default_tasks if variant_s < default_s else rivalry.variant_tasks
    ).items()
    every_task = sum(t["weight"] * t["best_latency_s"] for t in summary["tasks"])
    assert summary["estimated_latency_s"] == pytest.approx(
        every_task - int(loser.weight) * latency[loser_key]
    )
    vm = relax.VirtualMachine(compile_fused(module, target, database), tvm.cpu())
    x = np.random.default_rng(1).standard_normal((1, 28, 28, 16)).astype("float32")
    np.testing.assert_allclose(
        vm["main"](tvm.runtime.tensor(x)).numpy(), reference(x, weights), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("switch_wins", [True, False])
def test_a_form_the_estimate_moves_to_is_timed_against_the_form_chosen_before(
    tmp_path, monkeypatch, switch_wins
):
    """The contested layer, its forms' tasks tuned (fake latencies) and a round before
    having chosen the form the estimate now leaves: the next round builds the model in
    each form and times the tasks only each form has against each other; the store keeps
    the form it chose, the build follows it (while the estimate stays) and computes the
    same numbers as numpy, its kernels as the round timed them."""
    import tvm
    from tvm import relax

    from simpletvm.compiler.conv_forms import layer_key
    from simpletvm.compiler.lowering import workload_key
    from simpletvm.runtime.in_situ import WHOLE, BuildTimings
    from simpletvm.tuning import in_model
    from simpletvm.tuning.database import RecordDatabase, best_latency_s

    target = resolve_target("cpu")
    _, weights = two_layer_model()
    forms, _, records = fake_tuned(tmp_path)
    database = RecordDatabase(records, target.tvm_target())
    latency = partial(best_latency_s, database)
    _, [estimate] = forms.choose(latency)
    layer, estimated = estimate.layer, estimate.estimated
    before = 2 if estimated == 4 else 4
    database.note_form(layer_key(layer), before, before)  # a round kept the other form
    # the estimate moved since that round: a build follows it, as it applies a faster
    # record not timed yet; the round times the move
    assert forms.choose(latency, kept=database.kept_form)[1][0].chosen == estimated
    [rivalry] = forms.rivalries
    ours = forms.form_tasks(layer, estimated)
    theirs = forms.form_tasks(layer, before)
    assert set(ours) | set(theirs) == set(rivalry.default_tasks) | set(rivalry.variant_tasks)

    def names(module, keys):
        return {
            t.task_name
            for t in extract_tasks(module, target)
            if workload_key(t.dispatched[0]) in keys
        }

    challenger_module = forms.module({layer: estimated})
    incumbent_module = forms.module({layer: before})
    timed = []

    def time_builds(libraries, inputs, **_):
        timed.append([Path(library).name for library in libraries])
        if len(timed) == 1:  # each build holds its side's form of the layer
            kernels = [names(challenger_module, ours), names(incumbent_module, theirs)]
            assert all(kernels)
            for library, own, other in zip(libraries, kernels, kernels[::-1]):
                symbols = subprocess.run(["nm", library], capture_output=True, text=True).stdout
                assert all(k in symbols for k in own) and not any(k in symbols for k in other)
        if len(timed) == 2:  # the mix of the switch and the other kernels' incumbents
            return BuildTimings({2: [{WHOLE: 4.0}, {WHOLE: 5.0}]})
        medians = []
        for module, side, ms in (
            (challenger_module, ours, 1.0 if switch_wins else 3.0),
            (incumbent_module, theirs, 2.0),
        ):
            every = {t.task_name: 0.5 for t in extract_tasks(module, target)}
            medians.append({**every, **dict.fromkeys(names(module, side), ms), WHOLE: 5.0})
        medians[0][WHOLE] = 4.0 if switch_wins else 6.0
        return BuildTimings({2: medians})

    monkeypatch.setattr(in_model, "time_builds", time_builds)
    x = np.random.default_rng(1).standard_normal((1, 28, 28, 16)).astype("float32")
    timing = in_model.choose_in_model(
        forms, target, database, [([1, 28, 28, 16], "float32")], threads=2
    )
    label = f"{layer}: F({before},3) -> F({estimated},3)"
    assert timing.form_switches == {label: switch_wins}
    finding = next(f for f in timing.findings if f.task == label)
    assert (finding.challenger_ms, finding.incumbent_ms) == ((1.0 if switch_wins else 3.0), 2.0)
    assert timed[0] == ["challengers.so", "incumbents.so"]
    assert len(timed) == (2 if switch_wins else 1)  # a win mixes with the kept incumbents
    kept = estimated if switch_wins else before
    assert database.kept_form(layer_key(layer)) == (estimated, kept)
    module, [choice] = forms.choose(latency, kept=database.kept_form)
    assert choice.chosen == kept and module is forms.module({layer: kept})
    assert ("chosen_in_model_over" in choice.describe()) is not switch_wins
    chosen = database.with_in_model_choices()
    # the kept form's own tasks run as timed: the challenger's record, or the default
    # schedule the incumbent's side ran before any round
    side = ours if switch_wins else theirs
    assert {chosen.in_model_schedule(t.dispatched[0]) for t in side.values()} == {
        None if switch_wins else "default"
    }
    vm = relax.VirtualMachine(compile_fused(module, target, chosen), tvm.cpu())
    np.testing.assert_allclose(
        vm["main"](tvm.runtime.tensor(x)).numpy(), reference(x, weights), rtol=1e-4, atol=1e-4
    )
