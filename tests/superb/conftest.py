"""Grids, a tiny ONNX model, an isolated run store, and superb called in this process
(Typer's CliRunner); superb_helpers calls it as a real process."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from simpletvm.testing import tiny_cnn_onnx

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory):
    return tiny_cnn_onnx(tmp_path_factory.mktemp("models") / "tiny.onnx")


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
