"""Grids, a tiny ONNX model, an isolated run store, and superb called in this process
(Typer's CliRunner); superb_helpers calls it as a real process."""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path

import pytest
from superb_helpers import REPO

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _model_factories():
    path = REPO / "tests" / "simpletvm" / "model_factories.py"
    spec = importlib.util.spec_from_file_location("superb_tests_model_factories", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory):
    return _model_factories().make_tiny_cnn_onnx(
        tmp_path_factory.mktemp("models") / "tiny.onnx")


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def write_grid(tmp_path):
    def write(text: str, name: str = "grid.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path
    return write


@pytest.fixture
def cli():
    """Call superb in this process; returns Click's Result (exit_code, stdout, stderr)."""
    from typer.testing import CliRunner

    from superb.cli import app

    def call(*args):
        return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    return call
