"""A MetaSchedule builder whose worker processes live across batches.

MetaSchedule's LocalBuilder starts a fresh process pool on every ``build()`` call and
each worker imports all of TVM's tensor intrinsics (tens of seconds on a small host), so
a batch can spend its whole build timeout importing and lose every candidate. These workers
start once, load only the intrinsics of the target's kind, and are reused until the
builder is closed; a worker that times out or crashes is replaced, and only its
candidate is lost.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import Future

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.support.popen_pool import PopenPoolExecutor

from simpletvm._process.scratch import make_scratch_dir


def _worker_init(target_kind: str, triple: str | None, parent: int) -> None:
    from simpletvm._process.orphans import exit_with_parent
    from simpletvm.targets import load_tensor_intrinsics

    exit_with_parent(parent=parent)
    load_tensor_intrinsics(target_kind, triple)


def compile_candidate(mod, target):
    """One scheduled candidate compiled as the runner times it: its weights taken as
    given (the schedule's layout rewrite of them is dropped, as MetaSchedule does)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def _worker_build(mod, target, artifact_dir: str, link: bool) -> str:
    """Compile one candidate and export it: linked into a shared library, or as a tar of
    its object files that the runner links where it loads it."""
    from tvm.support.tar import tar

    directory = tempfile.mkdtemp(dir=artifact_dir)
    library = compile_candidate(mod, target)
    if link:
        path = os.path.join(directory, "candidate.so")
        library.export_library(path)
    else:
        path = os.path.join(directory, "candidate.tar")
        library.export_library(path, fcompile=tar)
    return path


@derived_object
class PersistentBuilder(PyBuilder):
    """Builds candidates in long-lived worker processes.

    Args:
        target_kind: ``"llvm"`` or ``"cuda"``: which tensor intrinsics workers load.
        triple: an LLVM target's triple (None: this host's), for the same reason.
        max_workers: parallel compilations (default: CPU cores).
        timeout_sec: per-candidate build timeout; the worker is replaced after one.
        link: link each candidate into a shared library here, for a runner on this
            machine: its profile stage, which holds the device, then only loads it, and
            the unpack and link move to the build stage, which does not hold the device
            and takes a little longer (BENCHMARKS.md). Without it, a tar that a remote
            runner links on its own machine.
    """

    def __init__(
        self,
        target_kind: str = "llvm",
        triple: str | None = None,
        max_workers: int | None = None,
        timeout_sec: float = 60.0,
        link: bool = False,
    ):
        super().__init__()
        self.max_workers = max_workers or os.cpu_count() or 1
        self.timeout_sec = timeout_sec
        self.link = link
        self.artifact_dir = make_scratch_dir("build")
        self._pool = PopenPoolExecutor(
            max_workers=self.max_workers,
            timeout=timeout_sec,
            initializer=_worker_init,
            initargs=(target_kind, triple, os.getpid()),
        )

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        futures: list[Future] = [
            self._pool.submit(_worker_build, item.mod, item.target, self.artifact_dir, self.link)
            for item in build_inputs
        ]
        results = []
        for future in futures:
            try:
                results.append(BuilderResult(future.result(), None))
            except TimeoutError:
                results.append(
                    BuilderResult(None, f"PersistentBuilder: timeout after {self.timeout_sec} s")
                )
            except Exception as error:  # noqa: BLE001 - a bad candidate is data, not a crash
                results.append(BuilderResult(None, f"{type(error).__name__}: {error}"))
        return results

    def close(self) -> None:
        """Stop the workers and delete the built artifacts."""
        self._pool.shutdown(wait=False)
        shutil.rmtree(self.artifact_dir, ignore_errors=True)
