"""Each task's fastest record timed against the schedule chosen before it (at first its
default schedule) inside the built model: the store keeps each round's choice against the
record it timed, a record is chosen only when faster by more than the margin and the model
built from the round's choices is faster as a whole, and a build applies the choices."""

from __future__ import annotations

import io
import multiprocessing
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.compiler.lowering import extract_tasks, workload_key
from simpletvm.errors import SimpleTVMError
from simpletvm.progress import TuningProgress
from simpletvm.runtime.in_situ import BETWEEN, WHOLE, BuildTimings, time_builds
from simpletvm.tuning import in_model
from simpletvm.tuning.database import RecordDatabase, record_as_json
from simpletvm.tuning.in_model import IN_MODEL_MARGIN, MODEL_MARGIN, round_choices
from simpletvm.tuning.in_model_store import InModelStore
from simpletvm.tuning.record_files import open_records
from simpletvm.tuning.records import RecordStore, target_key

SKYLAKE = {"kind": "llvm", "mcpu": "skylake", "keys": ["cpu"]}
FAST_SEARCH = {"population": 64, "genetic_iterations": 1, "remeasure": 0}


def _record(serial: int, latency: float) -> list:
    trace = [[["GetBlock", [], {"name": "C"}, [f"b{serial}"]]], [serial]]
    return [trace, [latency, latency], SKYLAKE, [["TENSOR", "float32", [16, 16]]]]


def test_a_choice_holds_for_the_record_it_was_made_with(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    key = target_key(SKYLAKE)
    older, newer = _record(1, 2e-5), _record(2, 1e-5)
    store.add("w", ["w", "{}"], [older], run_id="r")
    rounds = InModelStore(store)
    assert rounds.choice("w", key) is None
    # the first round keeps the default schedule
    rounds.note_choice("w", key, older, 0.98e-4, None, 1e-4, challenger_chosen=False)
    assert rounds.choice("w", key).chosen is None
    # the next one chooses the record
    rounds.note_choice("w", key, older, 0.9e-4, None, 1e-4, challenger_chosen=True)
    assert rounds.choice("w", key).chosen == older
    # a later, faster record has not been timed: a build applies it; the next round
    # times it against the record chosen before, which stays when it loses
    store.add("w", ["w", "{}"], [newer], run_id="r")
    choice = rounds.choice("w", key)
    assert choice.answers(older) and not choice.answers(newer)
    rounds.note_choice("w", key, newer, 1.2e-4, older, 1e-4, challenger_chosen=False)
    choice = rounds.choice("w", key)
    assert choice.answers(newer) and choice.chosen == older


def test_a_round_keeps_every_incumbent_when_its_choices_do_not_make_the_model_faster():
    # ms a model run: (challenger, incumbent) per kernel
    timed = {"conv": (0.90, 1.00), "dense": (0.50, 0.49), "pool": (0.20, 0.20)}
    # the choices' model: 3.00 less the 0.01 the kept dense saves = 2.99 ms
    wins, kept_as_a_whole = round_choices(timed, [], 3.00, 3.10)
    assert wins == {"conv": True, "dense": False, "pool": False}
    assert not kept_as_a_whole
    # the incumbents' build ran faster as a whole (the conv's gain was noise, or was
    # lost between the loops), or not 1% slower: nothing changes
    for incumbents_model_ms in (2.99, 3.01):
        wins, kept_as_a_whole = round_choices(timed, [], 3.00, incumbents_model_ms)
        assert wins == dict.fromkeys(timed, False)
        assert kept_as_a_whole
    # no challenger faster by the margin: kept kernel by kernel, not as a whole
    wins, kept_as_a_whole = round_choices({"dense": (0.50, 0.49)}, [], 3.00, 2.00)
    assert wins == {"dense": False} and not kept_as_a_whole


def test_a_round_takes_the_challengers_build_when_the_kernels_short_of_the_margin_gain():
    # the conv wins by the kernel margin; the dense and the pool gain 2% and 0.5%, short
    # of it, but in sum they save time: the model that keeps their incumbents (3.011 ms)
    # is slower than the challengers' build (3.00)
    timed = {"conv": (0.90, 1.00), "dense": (0.49, 0.50), "pool": (0.199, 0.20)}
    wins, kept_as_a_whole = round_choices(timed, ["reshape"], 3.00, 3.10)
    assert wins == dict.fromkeys([*timed, "reshape"], True) and not kept_as_a_whole
    # no kernel past the margin, the build as a whole 2% faster: it is chosen
    wins, kept_as_a_whole = round_choices({"dense": (0.49, 0.50)}, [], 3.00, 3.07)
    assert wins == {"dense": True} and not kept_as_a_whole
    # ... but not when the whole build is within the model's margin
    wins, kept_as_a_whole = round_choices({"dense": (0.49, 0.50)}, [], 3.00, 3.02)
    assert wins == {"dense": False} and not kept_as_a_whole
    # a kernel past the margin, the whole not faster: every incumbent kept, as a whole
    wins, kept_as_a_whole = round_choices(timed, [], 3.00, 3.01)
    assert wins == dict.fromkeys(timed, False) and kept_as_a_whole


def test_a_kernel_the_timing_cannot_see_follows_the_model():
    timed = {"conv": (0.90, 1.00), "dense": (0.50, 0.49)}
    # a timed challenger chosen: the build kept has the unseen kernel's fastest record
    wins, _ = round_choices(timed, ["reshape"], 3.00, 3.10)
    assert wins == {"conv": True, "dense": False, "reshape": True}
    # every incumbent kept, as a whole or kernel by kernel: so is the unseen one's
    assert round_choices(timed, ["reshape"], 3.00, 2.99) == (dict.fromkeys(wins, False), True)
    wins, _ = round_choices({"dense": (0.50, 0.49)}, ["reshape"], 3.00, 3.10)
    assert wins == {"dense": False, "reshape": False}
    # nothing timed apart: the whole model decides, by the model's margin
    assert round_choices({}, ["reshape"], 1.00, 1.02) == ({"reshape": True}, False)
    assert round_choices({}, ["reshape"], 1.00, 1.005) == ({"reshape": False}, False)


def test_a_finding_for_a_workload_the_store_lacks_is_refused(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    with pytest.raises(KeyError, match="not in the record store"):
        InModelStore(store).note_choice(
            "absent", "llvm/x/", _record(1, 1e-5), 1e-4, None, 1e-4, challenger_chosen=True
        )


@pytest.fixture(scope="module")
def tuning(tmp_path_factory, tiny_onnx):
    """Tuned with a minutes budget (the trials end it first) and a plain progress display:
    the tuned session and what the display printed."""
    out = io.StringIO()
    display = TuningProgress(
        "tiny", console=Console(file=out, force_terminal=False, width=200, markup=False)
    )
    store = tmp_path_factory.mktemp("store")
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx)
    stvm.autotune(
        trials=8,
        candidates_per_iteration=8,
        seed=0,
        in_model=True,
        minutes=0.5,
        progress=display,
        **FAST_SEARCH,
    )
    return stvm, out.getvalue(), stvm.in_model


@pytest.fixture(scope="module")
def tuned(tuning):
    return tuning[0]


@pytest.fixture
def untimed(tuned, tmp_path, tiny_onnx):
    """A session on a copy of the tuned store whose rounds inside the model are forgotten:
    each test notes its own."""
    shutil.copytree(tuned.store.root, tmp_path / "store")
    with sqlite3.connect(tmp_path / "store" / "records.sqlite") as connection:
        connection.execute("DELETE FROM in_model_choices")
    return SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(tiny_onnx)


def _last(stvm: SimpleTVM, name: str) -> dict:
    return next(s for s in reversed(stvm.context.steps) if s["step"] == name)


def test_autotune_times_every_parallel_kernel_inside_the_model(tuning):
    tuned, _, timing = tuning
    step = _last(tuned, "in_model")
    assert timing.findings and step["kernels"] == len(timing.findings)
    assert all(f.challenger_ms > 0 and f.incumbent_ms > 0 for f in timing.findings)
    # the first round times every record against its default schedule
    assert all(f.incumbent_is_default for f in timing.findings)
    assert step["incumbents_kept"] == [f.task for f in timing.kept]
    # each kernel's share of a run is within the run (medians: a kernel's median is at
    # most the run's, their sum is not bound by it when load hits kernels in turn)
    assert max(f.challenger_ms for f in timing.findings) < step["challengers_model_ms"]
    assert max(f.incumbent_ms for f in timing.findings) < step["incumbents_model_ms"]
    # a challenger is chosen only when faster by the margin; an incumbent kept is at most
    # the margin slower than its challenger, unless the round kept every incumbent because
    # the model their choices make was not faster as a whole. When the challengers short
    # of the margin gain in sum, the challengers' build is chosen as a whole (checked
    # below against the incumbents'), a kernel of it maybe a little slower alone.
    whole_build = all(f.challenger_chosen for f in timing.findings) and any(
        not f.challenger_ms < f.incumbent_ms * (1 - IN_MODEL_MARGIN) for f in timing.findings
    )
    for f in timing.findings:
        assert whole_build or f.chosen_ms <= f.incumbent_ms
        if timing.kept_as_a_whole:
            assert not f.challenger_chosen
        else:
            assert f.chosen_ms <= f.challenger_ms / (1 - IN_MODEL_MARGIN)
    # the promise: the build of the round's choices as timed, faster than the incumbents'
    # build in the same rounds; the incumbents' build when nothing was chosen
    chosen = [f for f in timing.findings if f.challenger_chosen]
    if not chosen:
        assert step["chosen_model_ms"] == step["incumbents_model_ms"]
    elif timing.kept:  # a mix of both builds: built and timed on its own
        assert step["chosen_model_ms"] == step["mixed_model_ms"]
        assert step["mixed_model_ms"] < step["mixed_against_ms"] * (1 - MODEL_MARGIN)
    else:
        assert step["chosen_model_ms"] == step["challengers_model_ms"]
        assert step["challengers_model_ms"] < step["incumbents_model_ms"] * (1 - MODEL_MARGIN)
    assert step["kept_as_a_whole"] == timing.kept_as_a_whole
    assert step["unseen_kernels"] == timing.unseen
    # not pinned: every core or one, whichever the incumbents' build ran faster on
    assert step["threads"] == timing.threads in (1, tuned.target.host_cores())
    assert not (timing.kept_as_a_whole and chosen)
    assert tuned.tuning_summary["in_model_latency_s"] == pytest.approx(
        step["chosen_model_ms"] / 1e3
    )


def test_a_minutes_budget_keeps_the_rounds_time_and_the_display_tells_it(tuning):
    from simpletvm.console import ms_text

    stvm, printed, first = tuning
    # 10 s and 1 s a kernel, at most half the budget: the search ends that much earlier
    assert _last(stvm, "autotune")["kept_for_in_model_s"] == pytest.approx(15.0)
    lines = printed.splitlines()
    assert lines[-3].endswith("; timing the tuned kernels inside the model"), lines
    whole = ms_text(first.chosen_model_ms / 1e3)
    kernels = ms_text(stvm.tuning_summary["estimated_latency_s"])
    assert lines[-2].endswith(
        f"; timed inside the model: {whole} ms, the model as a whole (its kernels timed "
        f"alone: {kernels} ms)"
    ), lines
    spent = stvm.tuning_summary["spent_s"]  # the whole wait, said last
    assert lines[-1].startswith("tuning tiny: spent ") and "of the 0:30 budget" in lines[-1]
    assert spent["in_model"] == pytest.approx(_last(stvm, "in_model")["duration_s"])


def test_the_next_round_times_records_against_what_was_chosen(tuning, tiny_onnx):
    tuned, _, timing = tuning
    # what the first round chose, kernels it could not time apart included
    chosen = {f.task: f.challenger_chosen for f in timing.findings} | timing.unseen
    later = SimpleTVM(BenchmarkingContext("cpu", store=tuned.store.root, num_threads=1)).from_model(
        tiny_onnx
    )
    second = later.choose_in_model(tuned.context.run_id).in_model
    assert second.threads == 1  # pinned: the round runs on what the build will
    assert {f.task for f in second.findings} | set(second.unseen) == set(chosen)
    for finding in second.findings:  # no new record: each against the first round's choice
        assert finding.incumbent_is_default == (not chosen[finding.task])


def test_a_build_applies_what_timing_inside_the_model_chose(untimed):
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    untuned = untimed.build(records=None).run(x)
    store = open_records(untimed.store.root)
    database = RecordDatabase(store, untimed.target.tvm_target())
    tasks = [
        task
        for task in extract_tasks(untimed.conv_forms.default, untimed.target)
        if database.has_workload(task.dispatched[0])
    ]
    assert tasks
    # the default schedule, 10x faster inside the model than each record: kept
    for task in tasks:
        assert database.note_in_model(task.dispatched[0], 1e-3, 1e-4, challenger_chosen=False)
    build = _last(untimed.build(records="global"), "build")
    assert build["tasks_on_default_in_model"] == len(tasks)
    assert build["tasks_with_records"] == build["tasks"] - len(tasks)
    np.testing.assert_allclose(untimed.run(x), untuned, rtol=1e-4, atol=1e-5)

    # the records, 10x faster: chosen and applied
    for task in tasks:
        assert database.note_in_model(task.dispatched[0], 1e-4, 1e-3, challenger_chosen=True)
    build = _last(untimed.build(records="global"), "build")
    assert build["tasks_on_default_in_model"] == 0
    assert build["tasks_with_records"] == build["tasks"]

    # a newer, faster record is applied until timed; when it loses to the record chosen
    # before, that earlier record is applied again
    mod = tasks[0].dispatched[0]
    key = workload_key(mod)
    earlier = record_as_json(database.get_top_k(database.commit_workload(mod), 1)[0])
    newer = record_as_json(database.get_top_k(database.commit_workload(mod), 2)[1])
    newer[1] = [float(earlier[1][0]) / 10]
    store.add(key, store.workload_json(key), [newer], run_id="later")
    assert database.with_in_model_choices().in_model_schedule(mod) is None
    assert database.incumbents().in_model_schedule(mod) == "earlier record"
    assert database.note_in_model(mod, 1e-3, 1e-4, challenger_chosen=False)
    build = _last(untimed.build(records="global"), "build")
    assert build["tasks_on_earlier_record_in_model"] == 1
    applied = database.with_in_model_choices().get_top_k(database.commit_workload(mod), 1)
    assert record_as_json(applied[0])[0] == earlier[0]
    np.testing.assert_allclose(untimed.run(x), untuned, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mixed_ms", [5.2, 4.97, 4.8])
def test_a_mix_of_challengers_and_incumbents_is_built_and_kept_only_when_faster(
    untimed, monkeypatch, mixed_ms
):
    database = RecordDatabase(open_records(untimed.store.root), untimed.target.tvm_target())
    tasks = [
        task
        for task in extract_tasks(untimed.conv_forms.default, untimed.target)
        if database.has_workload(task.dispatched[0])
    ]
    assert len(tasks) >= 2
    first, rest = tasks[0], tasks[1:]
    timed = []

    def time_builds(libraries, inputs, *, choose_threads, **_):
        timed.append([Path(library).name for library in libraries])
        assert choose_threads  # not pinned: each timing chooses on its first build
        if len(timed) == 1:  # the first record wins, the others lose to their defaults
            challengers = {first.task_name: 0.5, **{t.task_name: 1.0 for t in rest}}
            incumbents = {first.task_name: 1.0, **{t.task_name: 0.9 for t in rest}}
            on_two = [{**challengers, WHOLE: 5.0}, {**incumbents, WHOLE: 5.5}]
            return BuildTimings({2: on_two, 1: [{WHOLE: 6.0}, {WHOLE: 7.0}]})
        # the mix runs faster on 1 thread, the incumbents' build on 2: each judged on its own
        return BuildTimings(
            {2: [{WHOLE: mixed_ms + 0.5}, {WHOLE: 5.0}], 1: [{WHOLE: mixed_ms}, {WHOLE: 5.6}]}
        )

    # the mixed build reads the round's choices before they are kept
    planned = database.with_planned_choices({task.dispatched[0]: task is first for task in tasks})
    assert [planned.in_model_schedule(task.dispatched[0]) for task in tasks] == [None] + [
        "default"
    ] * len(rest)
    monkeypatch.setattr(in_model, "time_builds", time_builds)
    timing = untimed.choose_in_model("global").in_model
    assert timed == [["challengers.so", "incumbents.so"], ["chosen.so", "incumbents.so"]]
    chosen = database.with_in_model_choices()
    applied = [chosen.in_model_schedule(task.dispatched[0]) for task in tasks]
    if mixed_ms < 4.95:  # faster as a whole: the first record is applied, the rest default
        assert applied == [None] + ["default"] * len(rest)
        assert timing.chosen_model_ms == mixed_ms and not timing.kept_as_a_whole
        assert timing.threads == 1  # the promise is the mix, as timed
    else:  # slower, or not by 1%: every default schedule is kept
        assert applied == ["default"] * len(tasks)
        assert timing.kept_as_a_whole and not any(f.challenger_chosen for f in timing.findings)
        assert timing.chosen_model_ms == 5.5 and timing.threads == 2


def test_each_build_is_judged_as_a_whole_on_the_thread_count_it_runs_fastest_on(
    untimed, monkeypatch
):
    """Every challenger wins its kernel on the challengers' count (2), but the incumbents'
    build runs faster on 1 thread than the challengers' on 2: the round keeps it, and
    promises its time on 1."""
    database = RecordDatabase(open_records(untimed.store.root), untimed.target.tvm_target())
    tasks = [
        task
        for task in extract_tasks(untimed.conv_forms.default, untimed.target)
        if database.has_workload(task.dispatched[0])
    ]

    def time_builds(libraries, inputs, *, choose_threads, **_):
        assert choose_threads
        challengers = {t.task_name: 0.5 for t in tasks}
        incumbents = {t.task_name: 1.0 for t in tasks}
        on_two = [{**challengers, WHOLE: 5.0}, {**incumbents, WHOLE: 6.0}]
        return BuildTimings({2: on_two, 1: [{WHOLE: 5.5}, {WHOLE: 4.9}]})

    monkeypatch.setattr(in_model, "time_builds", time_builds)
    timing = untimed.choose_in_model("global").in_model
    assert all(finding.challenger_ms < finding.incumbent_ms for finding in timing.findings)
    assert timing.kept_as_a_whole and not any(f.challenger_chosen for f in timing.findings)
    assert timing.incumbents_model_ms == 4.9 and timing.chosen_model_ms == 4.9
    assert timing.threads == 1
    chosen = database.with_in_model_choices()
    assert [chosen.in_model_schedule(task.dispatched[0]) for task in tasks] == ["default"] * len(
        tasks
    )


def test_after_a_round_the_build_is_the_module_timed_even_where_the_timing_cannot_see(
    untimed, monkeypatch
):
    database = RecordDatabase(open_records(untimed.store.root), untimed.target.tvm_target())
    tasks = [
        task
        for task in extract_tasks(untimed.conv_forms.default, untimed.target)
        if database.has_workload(task.dispatched[0])
    ]
    seen, unseen = tasks[:-1], tasks[-1]

    def time_builds(libraries, inputs, **_):
        # every timed record loses to its default; the last kernel is not timed apart
        challengers = {t.task_name: 1.0 for t in seen}
        incumbents = {t.task_name: 0.5 for t in seen}
        return BuildTimings({2: [{**challengers, WHOLE: 6.0}, {**incumbents, WHOLE: 5.0}]})

    monkeypatch.setattr(in_model, "time_builds", time_builds)
    timing = untimed.choose_in_model("global").in_model
    assert timing.unseen == {unseen.task_name: False}
    assert timing.chosen_model_ms == 5.0
    # the build applies the default schedules timed, the unseen kernel's included
    build = _last(untimed.build(records="global"), "build")
    assert build["tasks_on_default_in_model"] == len(tasks)


def test_the_worker_names_each_parallel_kernel_of_every_build(tiny_onnx, tmp_path):
    """Two copies of one untuned build, timed in the worker: each kernel with a parallel
    loop is named as its task in both, beside the VM's own calls and the whole run."""
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(tiny_onnx)
    stvm.build(records=None).save(tmp_path / "module")
    library = next((tmp_path / "module").glob("*.so"))
    shape = list(stvm.model.inputs[0].shape)
    timing = time_builds([library, library], [(shape, "float32")], threads=2, rounds=2, runs=5)
    assert list(timing.by_threads) == [2]  # pinned: one count
    kernels = {name for name in timing.medians[0] if name not in (WHOLE, BETWEEN)}
    assert kernels == {name for name in timing.medians[1] if name not in (WHOLE, BETWEEN)}
    tasks = {task.task_name for task in extract_tasks(stvm.fused_module, stvm.target)}
    assert kernels and kernels <= tasks  # named, not addresses
    for medians in timing.medians:
        assert min(medians[name] for name in kernels) > 0
        assert medians[BETWEEN] > 0 and medians[WHOLE] > 0


def _kernel_ms_of_five_runs(library, shape, outcome) -> None:
    """In a process whose pool records its launches: :func:`kernel_ms` of five runs."""
    import tvm
    from tvm import relax

    from simpletvm.runtime import fork_join
    from simpletvm.runtime.in_situ import kernel_ms

    os.environ[fork_join.POOL_VARIABLE] = "timed"  # before the pool loads
    machine = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    fork_join.use_for_loaded_kernels(2)
    data = tvm.runtime.tensor(np.ones(shape, "float32"), tvm.cpu())
    outcome.put(kernel_ms(machine, tvm.cpu(), [data], runs=5))


def test_each_kernels_time_is_a_share_of_its_own_run(tiny_onnx, tmp_path):
    """Run by run, the kernels' times leave a positive rest of the recorded run, the VM's
    calls between the loops: no loop is counted twice or on every thread."""
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(tiny_onnx)
    stvm.build(records=None).save(tmp_path / "module")
    library = next((tmp_path / "module").glob("*.so"))
    context = multiprocessing.get_context("spawn")
    outcome = context.Queue()
    child = context.Process(
        target=_kernel_ms_of_five_runs,
        args=(library, list(stvm.model.inputs[0].shape), outcome),
    )
    child.start()
    spent = outcome.get(timeout=120)
    child.join(timeout=30)
    kernels = [name for name in spent if name not in (WHOLE, BETWEEN)]
    assert kernels and all(len(values) == 5 for values in spent.values())
    for run in range(5):
        assert spent[BETWEEN][run] > 0
        assert all(spent[name][run] > 0 for name in kernels)


def test_the_worker_times_every_build_on_both_thread_counts_when_choosing(tiny_onnx, tmp_path):
    """Not pinned, a short model's builds are timed on 2 threads and on 1 in the same
    rounds: the kernels compared where the first build runs fastest, each build judged on
    its own faster count."""
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(tiny_onnx)
    stvm.build(records=None).save(tmp_path / "module")
    library = next((tmp_path / "module").glob("*.so"))
    shape = list(stvm.model.inputs[0].shape)
    timing = time_builds(
        [library, library], [(shape, "float32")], threads=2, choose_threads=True, rounds=2, runs=3
    )
    assert sorted(timing.by_threads) == [1, 2]
    for build in (0, 1):
        ms, count = timing.fastest(build)
        assert ms == min(medians[build][WHOLE] for medians in timing.by_threads.values())
        assert timing.by_threads[count][build][WHOLE] == ms
    assert timing.medians == timing.by_threads[timing.threads]
    kernels = [
        {n for n in medians[0] if n not in (WHOLE, BETWEEN)}
        for medians in timing.by_threads.values()
    ]
    assert kernels[0] and kernels[0] == kernels[1]  # the same kernels seen on either count


def test_timing_inside_the_model_needs_this_machines_cpu(tiny_onnx, tmp_path):
    stvm = SimpleTVM(BenchmarkingContext("cuda", store=tmp_path)).from_model(tiny_onnx)
    with pytest.raises(SimpleTVMError, match="this machine's CPU"):
        stvm.choose_in_model()
