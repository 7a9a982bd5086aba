"""The compiled module a SimpleTVM holds, built here or loaded from a saved run: where its
library file is, the VM that runs it on this machine, and where run() and evaluate()
execute it (here, or on an RPC server that loads the exported file); with the checks a
saved module and a call's inputs must pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from simpletvm.errors import IncompatibleModuleError, RunNotFoundError, SimpleTVMError
from simpletvm.hostinfo import host_fingerprint
from simpletvm.models import ImportedModel, TensorSpec
from simpletvm.runtime.accuracy import compare
from simpletvm.runtime.loaded import as_numpy
from simpletvm.targets import ResolvedTarget

MODULE_FILE = "model.so"
METADATA_FILE = "metadata.json"


class CompiledModule:
    """``executable`` (None: a module for another CPU, kept as its file only) for
    ``target``, with ``vm`` running it here and ``library_file`` its exported library once
    exported (at build for this CPU, at save, or for an RPC server)."""

    def __init__(self, target: ResolvedTarget, executable, vm, library_file: Path | None):
        self.target = target
        self.executable = executable
        self.vm = vm
        self.library_file = library_file
        self._export_dir = None  # a temporary directory holding the file when not saved

    @classmethod
    def compiled(cls, executable, target: ResolvedTarget) -> CompiledModule:
        """A module straight from the compiler; code for another CPU runs only on a device
        of that kind, through RPC, so it gets no VM here."""
        module = cls(target, executable, None, None)
        if target.runs_here:
            module.vm = module.new_vm(module._library_here())
        return module

    @classmethod
    def loaded(cls, library_file: Path, target: ResolvedTarget) -> CompiledModule:
        """A saved module's library; for another CPU, run() and evaluate() upload it.

        The library is unloaded when the last object using it goes (TVM's own loader
        keeps every library it loads for the process's life), so that loading modules
        again and again does not grow the process."""
        if not target.runs_here:
            return cls(target, None, None, library_file)
        import tvm_ffi

        library = tvm_ffi.load_module(str(library_file), keep_module_alive=False)
        module = cls(target, library, None, library_file)
        module.vm = module.new_vm(library)
        return module

    def new_vm(self, executable):
        from tvm import relax

        return relax.VirtualMachine(executable, self.target.device())

    def save(self, directory: Path) -> None:
        """Write the library to ``directory`` (a file exported at build is copied), which
        then holds the module's file."""
        tmp = directory / f".{MODULE_FILE}.tmp.so"
        if self.library_file is not None:  # exported at build: the same file
            shutil.copyfile(self.library_file, tmp)
        else:
            self._export(tmp)
        tmp.replace(directory / MODULE_FILE)
        self.library_file = directory / MODULE_FILE

    def execution(self, rpc_tracker: tuple[str, int] | None, device_key: str | None):
        """Where run() and evaluate() execute: ``(vm, device, where)``. With an RPC
        tracker, on a server of ``device_key`` (the module exported once, uploaded and
        loaded there); else on this machine."""
        target = self.target
        if rpc_tracker is None:
            if not target.runs_here:
                raise SimpleTVMError(
                    f"the module is for another CPU ({target.cross_triple}) and cannot "
                    "run here: run it on such a device through an RPC tracker, "
                    "SimpleTVM(BenchmarkingContext(target, device_key=KEY), "
                    "rpc_tracker=(host, port)), with a server of KEY on the device"
                )
            return self.vm, target.device(), {"runner": "local"}
        from tvm import relax

        from simpletvm.remote.rpc import remote_module

        if self.library_file is None:
            self.library_file = self._temporary_export()
        remote = remote_module(rpc_tracker, device_key, self.library_file)
        device = remote.device(target.device_type)
        where = {
            "runner": "rpc",
            "rpc_tracker": list(rpc_tracker),
            "device_key": device_key,
            "server": list(remote.server),
        }
        return relax.VirtualMachine(remote.library, device), device, where

    def close(self) -> None:
        """Delete the temporary export, if any (exported again when needed)."""
        if self._export_dir is None:
            return
        if self.library_file is not None and self.library_file.parent == Path(
            self._export_dir.name
        ):
            self.library_file = None
        self._export_dir.cleanup()
        self._export_dir = None

    def _library_here(self):
        """The built module for this machine, as a loaded shared library.

        A CPU module straight from the compiler runs from LLVM's JIT, in memory, where its
        parallel loops can only use TVM's pool; exported and loaded like a saved module,
        they use SimpleTVM's (:mod:`simpletvm.runtime.fork_join`). A GPU module loads as is."""
        if self.target.device_type != "cpu":
            return self.executable
        import tvm

        self.library_file = self._temporary_export()
        return tvm.runtime.load_module(str(self.library_file))

    def _temporary_export(self) -> Path:
        """The built module exported to a temporary directory kept while it is in use."""
        from simpletvm._process.scratch import scratch_directory

        self._export_dir = scratch_directory("module")
        path = Path(self._export_dir.name) / MODULE_FILE
        self._export(path)
        return path

    def _export(self, path: Path) -> None:
        """Write the built library, linked by a cross compiler for another CPU."""
        self.executable.export_library(str(path), fcompile=self.target.library_compiler())


def compare_outputs(vm, inputs: list, expected, specs: list, tolerance: float | None):
    """The module's outputs (``specs``) on ``inputs`` against ``expected``, the source
    framework's (:func:`simpletvm.runtime.accuracy.compare`)."""
    outputs = as_numpy(vm["main"](*inputs)) if expected.outputs is not None else []
    return compare(
        [spec.name for spec in specs],
        outputs if isinstance(outputs, list) else [outputs],
        expected,
        tolerance,
    )


def saved_metadata(context, target: ResolvedTarget, model, records: str | None) -> dict:
    """What ``save()`` writes beside the library: the run, its target and host, the
    model's tensors and the records the build applied."""
    return {
        "run_id": context.run_id,
        "target": target.spec,
        "device_type": target.device_type,
        "host": context.host,
        "host_fingerprint": host_fingerprint(),
        "inputs": [s.to_dict() for s in model.inputs],
        "outputs": [s.to_dict() for s in model.outputs],
        "model": context.model,
        "records": records,
        "versions": context.versions,
    }


def saved_metadata_of(
    source_dir: Path, run_id: str, store_root: Path, target: ResolvedTarget
) -> dict[str, Any]:
    """The metadata of the module saved in ``source_dir`` (run ``run_id``'s), refused
    when there is none or it cannot run on ``target`` here."""
    metadata_path = source_dir / METADATA_FILE
    if not metadata_path.exists():
        raise RunNotFoundError(
            f"no saved module for run {run_id!r} under {source_dir}: check the run id "
            f"and the store root ({store_root})"
        )
    metadata = json.loads(metadata_path.read_text())
    check_compatible(metadata, target, source_dir)
    return metadata


def saved_model(metadata: dict[str, Any], run_id: str) -> ImportedModel:
    """The model a saved module was built from, as far as running it needs: its tensors."""
    return ImportedModel(
        None,
        [TensorSpec.from_dict(d) for d in metadata["inputs"]],
        [TensorSpec.from_dict(d) for d in metadata["outputs"]],
        metadata["model"].get("source", run_id),
        "saved",
        {"loaded_from": run_id},
    )


def check_compatible(metadata: dict[str, Any], target: ResolvedTarget, source_dir: Path) -> None:
    """Refuse a saved module (its ``metadata``) that cannot run on ``target`` here."""
    saved_kind = metadata["target"]["kind"]
    if saved_kind != target.kind:
        raise IncompatibleModuleError(
            f"the module in {source_dir} was built for target {saved_kind!r}, but this "
            f"context targets {target.kind!r}: load it with "
            f"BenchmarkingContext({saved_kind!r}) or rebuild it for this target"
        )
    if (
        target.device_type == "cpu"
        and target.runs_here
        and metadata["host_fingerprint"] != host_fingerprint()
    ):
        raise IncompatibleModuleError(
            f"the module in {source_dir} was built on another CPU "
            f"({metadata['host'].get('cpu_model')}, {metadata['host'].get('hostname')}); "
            "its machine code may not run here: rebuild it on this host"
        )


def match_inputs(specs: list, data: Any) -> list[np.ndarray]:
    """run()'s ``data`` as the model's inputs (``specs``), in order, each checked."""
    if isinstance(data, dict):
        missing = [s.name for s in specs if s.name not in data]
        if missing:
            raise ValueError(
                f"run() is missing inputs {missing}; the model takes {[s.name for s in specs]}"
            )
        values = [data[s.name] for s in specs]
    elif isinstance(data, (list, tuple)):
        values = list(data)
    else:
        values = [data]
    if len(values) != len(specs):
        raise ValueError(
            f"run() got {len(values)} inputs; the model takes {len(specs)}: "
            f"{[(s.name, s.shape) for s in specs]}"
        )
    arrays = []
    for spec, value in zip(specs, values):
        array = np.asarray(value)
        if tuple(array.shape) != tuple(spec.shape):
            raise ValueError(f"input {spec.name!r} must have shape {spec.shape}, got {array.shape}")
        if array.dtype != np.dtype(spec.dtype):  # refused as TFLite and ONNX Runtime do
            raise ValueError(
                f"input {spec.name!r} must be {spec.dtype}, got {array.dtype}: "
                f"convert it first (array.astype({spec.dtype!r}))"
            )
        arrays.append(np.ascontiguousarray(array))
    return arrays
