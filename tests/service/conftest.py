"""Fixtures of the service's tests; their helpers are in service_helpers.py (a module name
of its own: another directory's conftest may be the one imported as ``conftest``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simpletvm.testing import tiny_cnn_onnx


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return tiny_cnn_onnx(tmp_path_factory.mktemp("models") / "tiny.onnx")
