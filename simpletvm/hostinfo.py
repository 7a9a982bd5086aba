"""Facts about this host and the installed libraries, recorded with every run."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
from functools import lru_cache
from importlib import metadata

TRACKED_PACKAGES = (
    "simpletvm",
    "apache-tvm",
    "apache-tvm-ffi",
    "tensorflow",
    "tf2onnx",
    "onnx",
    "tflite",
    "xgboost",
    "numpy",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return sorted(line.split(":", 1)[1].split())
    except OSError:
        pass
    return []


@lru_cache(maxsize=1)
def host_facts() -> dict:
    """What the machine is: enough to tell whether a module built here runs elsewhere."""
    import psutil

    return {
        "hostname": socket.gethostname(),
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu_model": _cpu_model(),
        "physical_cores": psutil.cpu_count(logical=False) or os.cpu_count(),
        "logical_cores": psutil.cpu_count(logical=True) or os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "fingerprint": host_fingerprint(),
    }


@lru_cache(maxsize=1)
def host_fingerprint() -> str:
    """A short hash of the CPU (architecture, model, instruction-set flags).

    Two hosts with the same fingerprint can run each other's CPU modules.
    """
    text = "|".join([platform.machine(), _cpu_model(), " ".join(_cpu_flags())])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def library_versions() -> dict[str, str | None]:
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@lru_cache(maxsize=1)
def cache_bytes() -> dict[int, int]:
    """Data cache size per level (1, 2, 3) as one core sees it (Linux sysfs; empty
    where it says nothing)."""
    sizes: dict[int, int] = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return sizes
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "type"), encoding="utf-8") as handle:
                if handle.read().strip() == "Instruction":
                    continue
            with open(os.path.join(root, entry, "level"), encoding="utf-8") as handle:
                level = int(handle.read())
            with open(os.path.join(root, entry, "size"), encoding="utf-8") as handle:
                sizes[level] = _size_bytes(handle.read().strip())
        except (OSError, ValueError):
            continue
    return sizes


def _size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def host_description() -> dict:
    """The CPU as ``lscpu`` names it and as LLVM (so TVM's ``-mcpu``) detects it: what a
    benchmark's results and superb's closing round name their host by."""
    cpu = None
    try:
        listing = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in listing.splitlines()
                if line.startswith("Model name:")
            ),
            None,
        )
    except (OSError, subprocess.CalledProcessError):
        pass
    if cpu is None:
        cpu = _cpu_model()
    from tvm.target import codegen

    return {
        "cpu": cpu,
        "llvm_cpu": str(codegen.llvm_get_system_cpu()),
        "logical_cores": os.cpu_count(),
    }
