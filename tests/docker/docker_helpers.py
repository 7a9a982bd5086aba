"""The helper script as a module (it has no .py suffix) and the paths the tests read."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HELPER_PATH = REPO / "docker" / "simpletvm-docker"
DOCKERFILES = {
    "cpu": REPO / "docker" / "cpu.Dockerfile",
    "cuda": REPO / "docker" / "cuda.Dockerfile",
}


def _load_helper():
    loader = importlib.machinery.SourceFileLoader("simpletvm_docker", str(HELPER_PATH))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


simpletvm_docker = _load_helper()
