"""SimpleTVM's fork-join pool under real TVM kernels: installed into loaded libraries,
resized, correct after a fork, and compiled once per source."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import subprocess
import threading

import numpy as np
import psutil
import pytest

from simpletvm.runtime import fork_join
from simpletvm.runtime.threads import set_runtime_threads

ROWS = 64


@pytest.fixture(scope="module")
def parallel_kernel(tmp_path_factory):
    """A kernel whose outer loop is parallel, exported and loaded: (path, function)."""
    import tvm
    from tvm import te

    source = te.placeholder((ROWS, 256), "float32", name="source")
    doubled = te.compute((ROWS, 256), lambda i, j: source[i, j] * 2.0 + i, name="doubled")
    schedule = tvm.s_tir.Schedule(te.create_prim_func([source, doubled]))
    schedule.parallel(schedule.get_loops(schedule.get_sblock("doubled"))[0])
    path = tmp_path_factory.mktemp("kernel") / "parallel.so"
    tvm.compile(schedule.mod, target={"kind": "llvm"}).export_library(str(path))
    yield path, tvm.runtime.load_module(str(path))["main"]
    set_runtime_threads(psutil.cpu_count(logical=False) or 1)


def run(kernel) -> np.ndarray:
    import tvm

    data = np.arange(ROWS * 256, dtype="float32").reshape(ROWS, 256)
    result = tvm.runtime.tensor(np.zeros_like(data))
    kernel(tvm.runtime.tensor(data), result)
    return result.numpy()


def expected() -> np.ndarray:
    data = np.arange(ROWS * 256, dtype="float32").reshape(ROWS, 256)
    return data * 2.0 + np.arange(ROWS, dtype="float32")[:, None]


def launcher_of(library_path) -> int:
    """Where the loaded library's parallel loops are launched through."""
    library = ctypes.CDLL(str(library_path), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    return ctypes.c_void_p.in_dll(library, "__TVMBackendParallelLaunch").value


def pool_launcher() -> int:
    pool = ctypes.CDLL(str(fork_join.compiled_library()), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    return ctypes.cast(pool.simpletvm_parallel_launch, ctypes.c_void_p).value


def test_a_loaded_library_launches_its_parallel_loops_on_the_pool(parallel_kernel):
    path, kernel = parallel_kernel
    tvm_result = run(kernel)
    assert fork_join.use_for_loaded_kernels(2) >= 1
    assert launcher_of(path) == pool_launcher()
    assert fork_join.pool_of(path) == "simpletvm"
    assert fork_join.pool_threads() == 2
    np.testing.assert_array_equal(run(kernel), tvm_result)
    np.testing.assert_array_equal(run(kernel), expected())
    set_runtime_threads(1)  # resizes TVM's pool and this one alike
    assert fork_join.pool_threads() == 1
    np.testing.assert_array_equal(run(kernel), expected())


def test_a_build_says_which_pool_runs_its_loops(monkeypatch):
    """A loaded or built module's step names the pool; without one, TVM's, and why."""
    from simpletvm import BenchmarkingContext, SimpleTVM

    def unavailable(threads):
        raise fork_join.PoolUnavailable("no C compiler (cc: not found)")

    stvm = SimpleTVM(BenchmarkingContext("cpu", num_threads=1)).from_model(
        "mobilenetv2", alpha=0.35, image_size=32, classes=10
    )
    # the default schedules of an untuned build parallelize its heavy kernels
    assert stvm.build(records=None).context.steps[-1]["fork_join_pool"] == "simpletvm"
    monkeypatch.setattr(fork_join, "use_for_loaded_kernels", unavailable)
    with pytest.warns(UserWarning, match="TVM's pool.*no C compiler"):
        stvm.build(records=None)
    assert stvm.context.steps[-1]["fork_join_pool"] == "tvm (no C compiler (cc: not found))"


def test_workers_asked_not_to_spin_stay_on_tvms_pool(monkeypatch):
    """TVM_THREAD_POOL_SPIN_COUNT=0 (for machines shared with busy processes) is a
    setting of TVM's pool: kernels stay there, and no warning says otherwise."""
    import warnings

    from simpletvm import BenchmarkingContext, SimpleTVM

    monkeypatch.setenv("TVM_THREAD_POOL_SPIN_COUNT", "0")
    with pytest.raises(fork_join.PoolDeclined, match="TVM_THREAD_POOL_SPIN_COUNT=0"):
        fork_join.use_for_loaded_kernels(2)
    stvm = SimpleTVM(BenchmarkingContext("cpu", num_threads=1)).from_model(
        "mobilenetv2", alpha=0.35, image_size=32, classes=10
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stvm.build(records=None)
    assert stvm.context.steps[-1]["fork_join_pool"].startswith("tvm (TVM_THREAD_POOL_SPIN_COUNT=0")


@pytest.mark.parametrize("counts", [(1, 3, 2), (4, 1, 4, 2)])
def test_resizing_the_pool_keeps_every_row_computed(parallel_kernel, counts):
    """More threads than cores, back to one (the caller alone), and up again: workers are
    started and stopped, and each launch still covers every task."""
    _, kernel = parallel_kernel
    fork_join.use_for_loaded_kernels(2)
    for count in counts:
        fork_join.set_threads(count)
        assert fork_join.pool_threads() == count
        for _ in range(20):
            np.testing.assert_array_equal(run(kernel), expected())


def _child_runs(path, outcome) -> None:
    import tvm

    kernel = tvm.runtime.load_module(str(path))["main"]
    fork_join.use_for_loaded_kernels(2)
    outcome.put(bool(np.array_equal(run(kernel), expected())))


def test_a_forked_child_starts_its_own_workers(parallel_kernel):
    """The parent's workers do not exist in a forked child: the child's first parallel
    loop starts new ones instead of waiting for the parent's forever."""
    path, kernel = parallel_kernel
    fork_join.use_for_loaded_kernels(2)
    run(kernel)  # the parent's workers are running
    context = multiprocessing.get_context("fork")
    outcome = context.Queue()
    child = context.Process(target=_child_runs, args=(path, outcome))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung in its first parallel loop")
    assert child.exitcode == 0 and outcome.get(timeout=5) is True


def _caller_on_the_workers_cpu(path, outcome) -> None:
    """Bind the caller to the CPU worker 1 was bound to, launch, and report the CPUs
    the threads bound to one CPU (the worker) may use afterwards."""
    import tvm

    kernel = tvm.runtime.load_module(str(path))["main"]
    fork_join.use_for_loaded_kernels(2)
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[1]})
    correct = all(np.array_equal(run(kernel), expected()) for _ in range(5))
    bound = [
        os.sched_getaffinity(int(tid))
        for tid in os.listdir("/proc/self/task")
        if int(tid) != threading.get_native_id()
    ]
    outcome.put((correct, allowed, [sorted(cpus) for cpus in bound if len(cpus) == 1]))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move a worker")
def test_a_worker_leaves_the_cpu_the_caller_runs_on(parallel_kernel):
    """The system may keep the caller on the CPU a worker is bound to (then the caller
    runs every task itself): the launch moves that worker to a CPU nobody uses."""
    path, _ = parallel_kernel
    context = multiprocessing.get_context("fork")
    outcome = context.Queue()
    child = context.Process(target=_caller_on_the_workers_cpu, args=(path, outcome))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    correct, allowed, bound = outcome.get(timeout=5)
    assert correct
    assert bound == [[allowed[0]]]  # the worker, now on the CPU the caller left


# elements: the caller's half lasts long enough for the worker to run the other
CHECKED = 1 << 22


@pytest.fixture(scope="module")
def checking_kernel(tmp_path_factory):
    """A library whose parallel loop asserts each input is non-negative."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def main(values: T.Buffer((CHECKED,), "float32"), result: T.Buffer((CHECKED,), "float32")):
        for i in T.parallel(CHECKED):
            assert values[i] >= T.float32(0), "a negative input"
            result[i] = values[i] + T.float32(1)

    path = tmp_path_factory.mktemp("checking") / "checking.so"
    tvm.compile(tvm.IRModule({"main": main}), target={"kind": "llvm"}).export_library(str(path))
    return path


def _errors_of_the_last_task(path, outcome) -> None:
    import tvm

    kernel = tvm.runtime.load_module(str(path))["main"]
    fork_join.use_for_loaded_kernels(2)
    values = np.ones(CHECKED, "float32")
    values[-1] = -1  # in the worker's half
    messages = []
    for _ in range(10):
        try:
            kernel(tvm.runtime.tensor(values), tvm.runtime.tensor(np.zeros_like(values)))
            messages.append("no error")
        except Exception as error:  # noqa: BLE001 - the message is what is checked
            messages.append(str(error))
    outcome.put(messages)


def test_an_error_on_a_worker_thread_reaches_the_caller(checking_kernel):
    """A kernel failing on a worker raises its error in that thread's slot; the pool
    moves it to the caller's, where TVM reads it (else TVM found none and crashed)."""
    context = multiprocessing.get_context("fork")
    outcome = context.Queue()
    child = context.Process(target=_errors_of_the_last_task, args=(checking_kernel, outcome))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0, f"the child ended with {child.exitcode}"
    messages = outcome.get(timeout=5)
    assert len(messages) == 10 and all("a negative input" in message for message in messages)


def test_libraries_that_synchronise_inside_a_loop_keep_tvms_pool(tmp_path):
    """A library linking TVM's barrier keeps its launcher: the pool has no barrier."""
    libraries = {}
    for name, source in {
        "plain": "void* __TVMBackendParallelLaunch = (void*)1;",
        "barrier": "void* __TVMBackendParallelLaunch = (void*)1;\n"
        "void* __TVMBackendParallelBarrier = (void*)1;",
    }.items():
        (tmp_path / f"{name}.c").write_text(source + "\n")
        subprocess.run(
            [
                "cc",
                "-shared",
                "-fPIC",
                str(tmp_path / f"{name}.c"),
                "-o",
                str(tmp_path / f"{name}.so"),
            ],
            check=True,
        )
        libraries[name] = ctypes.CDLL(str(tmp_path / f"{name}.so"))
    fork_join.use_for_loaded_kernels(2)
    assert launcher_of(tmp_path / "plain.so") == pool_launcher()
    assert launcher_of(tmp_path / "barrier.so") == 1
    assert fork_join.pool_of(tmp_path / "barrier.so") == "tvm"
    with pytest.raises(ValueError, match="not loaded"):
        fork_join.pool_of(tmp_path / "plain.c")


def test_the_pool_is_compiled_once_per_source(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    library = fork_join.compiled_library(cache)
    assert library.parent == cache and library.exists()
    edited = tmp_path / fork_join.SOURCE.name
    edited.write_text(fork_join.SOURCE.read_text() + "\n/* an edit */\n")
    with monkeypatch.context() as patch:
        patch.setenv("CC", str(tmp_path / "no-such-compiler"))
        assert fork_join.compiled_library(cache) == library  # the cached one, not rebuilt
        patch.setattr(fork_join, "SOURCE", edited)
        with pytest.raises(fork_join.PoolUnavailable):  # an edited source is compiled anew
            fork_join.compiled_library(cache)
    monkeypatch.setattr(fork_join, "SOURCE", edited)
    rebuilt = fork_join.compiled_library(cache)
    assert rebuilt != library and {rebuilt, library} == set(cache.iterdir())
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert fork_join.compiled_library(cache) == rebuilt  # and then kept too


def test_without_a_compiler_the_reason_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with pytest.raises(fork_join.PoolUnavailable, match="no C compiler.*install gcc, or set CC"):
        fork_join.compiled_library(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def _launches_of_five_runs(path, outcome) -> None:
    """In a process whose pool records its launches: five runs of the kernel inside the
    record, one outside; reports what was recorded and the file holding the lambda."""
    import tvm

    os.environ[fork_join.POOL_VARIABLE] = "timed"  # before the pool loads
    kernel = tvm.runtime.load_module(str(path))["main"]
    fork_join.use_for_loaded_kernels(2)
    correct = np.array_equal(run(kernel), expected())
    with fork_join.launches_recorded() as launches:
        outputs = [run(kernel) for _ in range(5)]
    run(kernel)  # after the block: not recorded
    addresses = {launch.lambda_address for launch in launches}
    holder = ""
    for line in open("/proc/self/maps").read().splitlines():
        parts = line.split(maxsplit=5)
        low, high = (int(n, 16) for n in parts[0].split("-"))
        if len(parts) == 6 and any(low <= address < high for address in addresses):
            holder = parts[5]
    spans = [launch.end - launch.start for launch in launches]
    outcome.put(
        (
            correct and all(np.array_equal(out, expected()) for out in outputs),
            len(launches),
            len(addresses),
            holder,
            all(0 < span < 1 for span in spans),
        )
    )


def test_a_timed_pool_records_each_launch_of_a_kernel(parallel_kernel):
    """SIMPLETVM_FORK_JOIN_POOL=timed: every parallel loop launched inside
    ``launches_recorded`` is recorded once, with its kernel's lambda (in the kernel's
    library) and a start and end; the kernel still computes every row."""
    path, _ = parallel_kernel
    context = multiprocessing.get_context("spawn")
    outcome = context.Queue()
    child = context.Process(target=_launches_of_five_runs, args=(path, outcome))
    child.start()
    correct, count, lambdas, holder, spans_sane = outcome.get(timeout=120)
    child.join(timeout=30)
    assert correct and count == 5 and lambdas == 1, (count, lambdas)
    assert os.path.samefile(holder, path) and spans_sane


def test_an_untimed_pool_says_how_to_record_launches():
    with pytest.raises(fork_join.PoolUnavailable, match="SIMPLETVM_FORK_JOIN_POOL=timed"):
        with fork_join.launches_recorded():
            pass
