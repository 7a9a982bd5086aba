"""Facts about this host and the installed libraries, recorded with every run."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from functools import lru_cache
from importlib import metadata

TRACKED_PACKAGES = (
    "simpletvm", "apache-tvm", "apache-tvm-ffi", "tensorflow", "tf2onnx", "onnx",
    "tflite", "xgboost", "numpy",
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
