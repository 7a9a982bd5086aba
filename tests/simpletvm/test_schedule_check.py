"""Every schedule a build applies is checked against TVM's naive one
(simpletvm.compiler.schedule_check): a wrong default falls back, a wrong record is
refused, verdicts are kept. The wrong schedules are real: TVM's layout rewrite on a
one-filter transposed convolution (docs/decisions/001-transposed-convolutions.md), with
SimpleTVM's rewrite of such convolutions turned off."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

import simpletvm.compiler.schedule_check as schedule_check
from simpletvm.closeness import relative_error
from simpletvm.compiler import machine_verdicts, transposed_conv
from simpletvm.compiler.build import compile_fused
from simpletvm.compiler.default_schedules import default_candidate
from simpletvm.compiler.lowering import extract_tasks, fuse
from simpletvm.compiler.machine_verdicts import MachineVerdicts
from simpletvm.compiler.schedule_check import Verdict
from simpletvm.targets import resolve_target
from simpletvm.tuning.database import RecordDatabase
from simpletvm.tuning.records import RecordStore, tvm_target_key
from simpletvm.tuning.verdicts import StoredVerdicts

IN_SHAPE = (1, 16, 6, 6)


@pytest.fixture(scope="module")
def target():
    return resolve_target("cpu")


@pytest.fixture
def one_filter(target, monkeypatch):
    """A fused one-filter transposed convolution as TVM legalizes it, its input and its
    right output (TVM's naive schedule)."""
    weight = np.random.default_rng(1).standard_normal((16, 1, 2, 2)).astype("float32")
    x = relax.Var("x", relax.TensorType(IN_SHAPE, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d_transpose(x, relax.const(weight), strides=(2, 2)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    monkeypatch.setattr(transposed_conv, "direct_transposed_convs", lambda mod: (mod, 0))
    fused = fuse(bb.get(), target)
    data = np.random.default_rng(2).standard_normal(IN_SHAPE).astype("float32")
    right = _run(compile_fused(fused, target, default_schedules=False), data)
    return fused, data, right


def _run(executable, data):
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(data)).numpy()


def _book(tmp_path, target):
    store = RecordStore(tmp_path / "records.sqlite")
    return store, StoredVerdicts(store, tvm_target_key(target.tvm_target()))


def test_a_wrong_default_schedule_falls_back_to_the_naive_one_and_is_right(
    one_filter, target, tmp_path
):
    fused, data, right = one_filter
    unchecked = _run(compile_fused(fused, target, check=False), data)
    assert relative_error(unchecked, right)[0] > 0.1  # the default schedule is wrong
    _, book = _book(tmp_path, target)
    with pytest.warns(UserWarning, match="default schedule of .* different answer"):
        checked = _run(compile_fused(fused, target, verdicts=book), data)
    np.testing.assert_allclose(checked, right, rtol=1e-5, atol=1e-5)
    assert book.counts() == {"right": 0, "wrong": 1}


def test_a_verdict_is_kept_and_the_next_build_checks_nothing(
    one_filter, target, tmp_path, monkeypatch
):
    fused, data, right = one_filter
    _, book = _book(tmp_path, target)
    with pytest.warns(UserWarning):
        compile_fused(fused, target, verdicts=book)
    ran = []
    original = schedule_check.check_kernels
    monkeypatch.setattr(
        schedule_check,
        "check_kernels",
        lambda pairs, tvm_target: ran.append(len(pairs)) or original(pairs, tvm_target),
    )
    with pytest.warns(UserWarning, match="default schedule"):  # from the kept verdict
        again = _run(compile_fused(fused, target, verdicts=book), data)
    np.testing.assert_allclose(again, right, rtol=1e-5, atol=1e-5)
    assert sum(ran) == 0


def test_a_planted_wrong_record_is_refused_and_the_build_is_right(one_filter, target, tmp_path):
    fused, data, right = one_filter
    store = RecordStore(tmp_path / "records.sqlite")
    database = RecordDatabase(store, target.tvm_target())
    (task,) = extract_tasks(fused, target)
    task_mod = task.dispatched[0]
    wrong = default_candidate(task_mod, task.target)  # TVM's faulty layout rewrite inside
    database.commit_tuning_record(
        ms.database.TuningRecord(
            wrong.sch.trace,
            database.commit_workload(task_mod),
            [1e-6],
            target.tvm_target(),
            wrong.args_info,
        )
    )
    assert _unchecked_with(fused, target, database, data, right) > 0.1
    with pytest.warns(UserWarning, match="record schedule of .* different answer"):
        built = _run(compile_fused(fused, target, database), data)
    np.testing.assert_allclose(built, right, rtol=1e-5, atol=1e-5)
    assert database.get_top_k(database.commit_workload(task_mod), 5) == []
    assert store.read("SELECT COUNT(*) FROM refused")[0][0] == 1


def _unchecked_with(fused, target, database, data, right) -> float:
    return relative_error(_run(compile_fused(fused, target, database, check=False), data), right)[0]


def _conv_relu(target):
    weight = np.random.default_rng(3).standard_normal((8, 3, 3, 4)).astype("float32")
    x = relax.Var("x", relax.TensorType((1, 10, 10, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, relax.const(weight), data_layout="NHWC", kernel_layout="OHWI")
            out = bb.emit_output(bb.emit(relax.op.nn.relu(y)))
        bb.emit_func_output(out)
    return fuse(bb.get(), target)


def test_a_right_build_keeps_every_schedule_and_records_right_verdicts(target, tmp_path):
    _, book = _book(tmp_path, target)
    compile_fused(_conv_relu(target), target, verdicts=book)
    assert book.counts()["wrong"] == 0
    assert book.counts()["right"] >= 1


def _counting_checks(monkeypatch) -> list[int]:
    """How many kernels each later check compiles and runs."""
    ran: list[int] = []
    original = schedule_check.check_kernels
    monkeypatch.setattr(
        schedule_check,
        "check_kernels",
        lambda pairs, tvm_target: ran.append(len(pairs)) or original(pairs, tvm_target),
    )
    return ran


def test_a_kernel_checked_for_one_store_is_not_checked_again_for_another(
    target, tmp_path, monkeypatch
):
    monkeypatch.setenv("SIMPLETVM_CACHE_DIR", str(tmp_path / "cache"))
    fused = _conv_relu(target)
    _, first = _book(tmp_path / "first", target)
    compile_fused(fused, target, verdicts=first)
    ran = _counting_checks(monkeypatch)
    _, second = _book(tmp_path / "second", target)
    compile_fused(fused, target, verdicts=second)
    assert sum(ran) == 0
    assert second.counts() == first.counts()  # the store's book is whole all the same


def test_another_tvm_or_check_checks_again(target, tmp_path, monkeypatch):
    monkeypatch.setenv("SIMPLETVM_CACHE_DIR", str(tmp_path / "cache"))
    fused = _conv_relu(target)
    compile_fused(fused, target, verdicts=_book(tmp_path / "first", target)[1])
    ran = _counting_checks(monkeypatch)
    monkeypatch.setattr(machine_verdicts, "checker_identity", lambda: "another TVM")
    compile_fused(fused, target, verdicts=_book(tmp_path / "second", target)[1])
    assert sum(ran) >= 1


def test_a_machine_book_it_cannot_open_is_passed_over(tmp_path):
    book = MachineVerdicts("llvm", tmp_path / "missing" / "checks.sqlite")
    book.note_schedule_verdict("workload", "schedule", Verdict(True, 0.0))
    assert book.schedule_verdict("workload", "schedule") is None


@pytest.mark.parametrize(
    ("expected", "got", "error"),
    [
        ([1.0, -2.0], [1.0, -2.0], 0.0),
        ([1.0, -2.0], [1.0, -1.0], 0.5),
        ([np.nan, 1.0], [np.nan, 1.0], 0.0),
        ([np.nan, 1.0], [0.0, 1.0], np.inf),
        ([np.inf, 1.0], [np.inf, 1.0], 0.0),
    ],
)
def test_the_relative_error_is_against_the_largest_expected_value(expected, got, error):
    assert relative_error(np.array(got), np.array(expected))[0] == error


def test_a_verdict_describes_itself():
    assert "different answer" in Verdict(False, 0.5).describe()
    assert Verdict(False, None, "does not run: x").describe() == "does not run: x"


def test_the_tuner_turns_a_wrong_fastest_candidate_into_a_failure(one_filter, target):
    from tvm import s_tir
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from simpletvm.tuning.candidate_check import refuse_wrong_fastest

    fused, _, _ = one_filter
    (task,) = extract_tasks(fused, target)
    task_mod = task.dispatched[0]
    wrong = default_candidate(task_mod, task.target)
    right = ms.MeasureCandidate(s_tir.Schedule(task_mod), wrong.args_info)
    slow_right = ms.MeasureCandidate(s_tir.Schedule(task_mod), wrong.args_info)
    results = [RunnerResult([1e-6], None), RunnerResult([2e-6], None), RunnerResult([3e-6], None)]
    checked, refused = refuse_wrong_fastest(
        task_mod, [wrong, right, slow_right], results, None, target.tvm_target()
    )
    assert checked[0].run_secs is None and "wrong answer" in checked[0].error_msg
    assert len(refused) == 1
    assert [float(s) for s in checked[1].run_secs] == [2e-6]  # right: the new best
    assert [float(s) for s in checked[2].run_secs] == [3e-6]  # slower than it: unchecked
    # nothing faster than the task's best so far: nothing checked, nothing refused
    unchanged, refused = refuse_wrong_fastest(
        task_mod, [wrong, right, slow_right], results, 5e-7, target.tvm_target()
    )
    assert refused == [] and unchanged[0].run_secs is not None
