"""From what a user says ("cpu", "cuda", a TVM dict) to TVM targets and devices.

Also loads only the tensor intrinsics a target can use: TVM's own
``import tvm.s_tir.tensor_intrin`` registers every backend's intrinsics and takes
20-50 s on small hosts (the CUDA set alone is most of it), once per process that
tunes or builds candidates.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import types
from dataclasses import dataclass
from typing import Any

from simpletvm.errors import SimpleTVMError

CPU_NAMES = ("cpu", "llvm")
CUDA_NAMES = ("cuda", "gpu")
CROSS_COMPILER_VARIABLE = "SIMPLETVM_CROSS_CC"


@dataclass(frozen=True)
class ResolvedTarget:
    """A TVM target plus what runs and measures on it."""

    spec: dict[str, Any]
    device_type: str  # "cpu" or "cuda": what runtime devices and runners call it

    @property
    def kind(self) -> str:
        return self.spec["kind"]

    def tvm_target(self):
        import tvm

        spec = dict(self.spec)
        if "host" in spec:
            spec["host"] = dict(spec["host"])
        return tvm.target.Target(spec)

    def host_cores(self) -> int:
        """The CPU threads the target's host code (all of a CPU target's code) uses."""
        import psutil

        llvm = self.spec if self.spec["kind"] == "llvm" else self.spec.get("host")
        given = llvm.get("num-cores") if isinstance(llvm, dict) else None
        return int(given or psutil.cpu_count(logical=False) or 1)

    def device(self, index: int = 0):
        import tvm

        return tvm.device(self.device_type, index)

    @property
    def llvm_triple(self) -> str | None:
        """The LLVM triple the CPU code is for, when the target names one (None: this
        host's)."""
        llvm = self.spec if self.spec["kind"] == "llvm" else self.spec.get("host")
        triple = llvm.get("mtriple") if isinstance(llvm, dict) else None
        return str(triple) if triple else None

    @property
    def cross_triple(self) -> str | None:
        """The LLVM triple of another CPU the code is for (None: this host's kind), e.g.
        ``aarch64-linux-gnu``: such code builds here but runs only on a remote device."""
        triple = self.llvm_triple
        if not triple or _arch(triple) == _arch(host_triple()):
            return None
        return triple

    @property
    def runs_here(self) -> bool:
        return self.cross_triple is None

    def library_compiler(self):
        """The ``fcompile`` that links an exported library for this target: None (the
        host's compiler) unless the code is for another CPU (:func:`cross_compiler`)."""
        triple = self.cross_triple
        return cross_compiler(triple) if triple else None


def host_cpu_arch() -> str:
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def host_triple() -> str:
    from tvm.target import codegen

    return str(codegen.llvm_get_system_triple())


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def cross_compiler(triple: str):
    """An ``fcompile`` for ``export_library`` that links objects for ``triple``.

    ``$SIMPLETVM_CROSS_CC`` names the command (with options, e.g. ``clang
    --target=aarch64-linux-gnu -fuse-ld=lld``); otherwise the first installed of
    ``<triple>-g++``, ``<triple>-gcc`` and clang with LLVM's linker. Raises a
    SimpleTVMError naming what is missing and how to install it.
    """
    from tvm.support import cc

    given = os.environ.get(CROSS_COMPILER_VARIABLE)
    if given:
        command = shlex.split(given)
        if not shutil.which(command[0]):
            raise SimpleTVMError(
                f"${CROSS_COMPILER_VARIABLE} names {command[0]!r}, which is not installed or "
                f"not on PATH: install it or point ${CROSS_COMPILER_VARIABLE} to a compiler "
                f"for {triple}"
            )
    else:
        command = _installed_cross_compiler(triple)

    def fcompile(output, objects, options=None):
        # not tvm.support.cc.cross_compiler: its function appends each call's options to
        # the ones it was made with, so they pile up from one export to the next
        cc.create_shared(output, objects, [*command[1:], *(options or [])], cc=command[0])

    fcompile.output_format = "so"
    return fcompile


def _installed_cross_compiler(triple: str) -> list[str]:
    for name in (f"{triple}-g++", f"{triple}-gcc"):
        if shutil.which(name):
            return [name]
    if shutil.which("clang") and shutil.which("ld.lld"):
        return ["clang", f"--target={triple}", "-fuse-ld=lld"]
    raise SimpleTVMError(
        f"the target is for another CPU ({triple}): its library is linked by a cross "
        f"compiler, and none is installed ({triple}-g++, {triple}-gcc, or clang with lld, "
        f"on PATH). Install one, e.g. `apt-get install g++-{triple}` (Debian, Ubuntu), or "
        f"set ${CROSS_COMPILER_VARIABLE} to its command (e.g. 'clang --target={triple} "
        "-fuse-ld=lld')"
    )


def parse_target_string(text: str) -> dict[str, Any]:
    """A TVM target string (``llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+v8.2a``) as
    the dict TVM 0.27 takes: 0.27 parses no target strings, and users still write them."""
    kind, *options = text.split()
    spec: dict[str, Any] = {"kind": kind}
    for option in options:
        key, sep, value = option.lstrip("-").partition("=")
        if not option.startswith("-") or not sep:
            raise SimpleTVMError(
                f"cannot read {option!r} in target {text!r}: options look like -key=value, "
                "e.g. 'llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon'"
            )
        if key in ("mattr", "libs", "keys"):
            spec[key] = value.split(",")
        else:  # TVM types its integer options (num-cores, opt-level, vector_width)
            spec[key] = int(value) if value.lstrip("-").isdigit() else value
    return spec


def resolve_target(
    target: str | dict,
    cpu_arch: str | None = None,
    num_threads: int | None = None,
    cuda_arch: str | None = None,
) -> ResolvedTarget:
    """Turn a user's target into a TVM target spec.

    ``"cpu"`` compiles for the local CPU (``cpu_arch`` or the host's own), ``"cuda"``
    for an NVIDIA GPU (``cuda_arch`` like ``"sm_90"``; kernels are cross-compiled on the
    host). A dict is taken as a TVM target spec as is, and so is a TVM target string
    (``"llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"``, code for another CPU).
    """
    import psutil

    cores = num_threads or psutil.cpu_count(logical=False) or 1
    if isinstance(target, str) and " -" in target:
        target = parse_target_string(target)
    if isinstance(target, dict):
        spec = dict(target)
        if "kind" not in spec:
            raise SimpleTVMError(f"target dict {target!r} has no 'kind': e.g. {{'kind': 'llvm'}}")
        device_type = "cuda" if spec["kind"] == "cuda" else "cpu"
        return ResolvedTarget(spec, device_type)
    name = str(target).lower()
    llvm = {"kind": "llvm", "mcpu": cpu_arch or host_cpu_arch(), "num-cores": cores}
    if name in CPU_NAMES:
        return ResolvedTarget(llvm, "cpu")
    if name in CUDA_NAMES:
        spec: dict[str, Any] = {"kind": "cuda", "host": llvm}
        if cuda_arch:
            spec["arch"] = cuda_arch
        return ResolvedTarget(spec, "cuda")
    raise SimpleTVMError(
        f"unknown target {target!r}: use 'cpu', 'cuda', a TVM target dict such as "
        "{'kind': 'llvm', 'mcpu': 'skylake'} or string such as "
        "'llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72'"
    )


RUNTIME_THREADS_VARIABLE = "TVM_NUM_THREADS"


def use_runtime_threads(count: int) -> None:
    """Give TVM's runtime thread pool ``count`` threads, in this process and in the
    processes it starts (runners, RPC servers).

    Unless told, TVM's runtime takes half the hardware threads on x86, assuming two per
    core: on a 2-vCPU machine every kernel would run on one thread, and tuning would
    measure one thread, where two run a model such as ResNet-18 far faster. The pool
    reads the setting when it starts, at the first parallel kernel of the process.
    """
    os.environ[RUNTIME_THREADS_VARIABLE] = str(count)


def load_tensor_intrinsics(kind: str, triple: str | None = None) -> None:
    """Register the tensor intrinsics a target of ``kind`` can use, and no others.

    For LLVM targets the set of the CPU family the code is for (``triple``, by default
    this host's): x86's or Arm's, a second at most instead of the tens of seconds TVM's
    all-backends import costs (Arm's alone takes seconds, which every tuning worker of an
    x86 target would pay for nothing). CUDA targets get TVM's full set. Safe to call
    repeatedly.
    """
    name = "tvm.s_tir.tensor_intrin"
    if kind != "llvm":
        importlib.import_module(name)
        importlib.import_module(f"{name}.cuda")  # also when a CPU stub came first
        return
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        package = types.ModuleType(name)
        package.__path__ = list(spec.submodule_search_locations)  # type: ignore[attr-defined]
        package.__spec__ = spec
        package.__package__ = name
        sys.modules[name] = package
    arch = _arch(triple or host_triple())
    family = "arm_cpu" if arch.startswith(("aarch64", "arm")) else "x86"
    importlib.import_module(f"{name}.{family}")
