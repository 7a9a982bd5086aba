"""A plain `pip install .` has no service extra: the service's commands say which extra
to install, with the bad-input exit code, instead of failing on an import."""

from __future__ import annotations

from typer.testing import CliRunner

import service
from simpletvm.cli import app


def test_service_commands_name_the_extra_when_its_libraries_are_missing(monkeypatch):
    monkeypatch.setattr(service, "EXTRA_MODULES", (*service.EXTRA_MODULES, "no_such_module"))
    for command in ("serve", "submit", "jobs", "fetch"):
        result = CliRunner().invoke(app, [command, "--help"])
        assert result.exit_code == 2, result.output
        assert "needs no_such_module" in result.output
        assert "pip install 'simpletvm[service]'" in result.output


def test_service_commands_run_when_the_extra_is_installed():
    result = CliRunner().invoke(app, ["jobs", "--help"])
    assert result.exit_code == 0, result.output
    assert "--server" in result.output


def test_the_client_names_the_extra_without_httpx_and_simpletvm_imports_without_it(monkeypatch):
    import importlib
    import subprocess
    import sys

    import pytest

    monkeypatch.setitem(sys.modules, "httpx", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "simpletvm.client", raising=False)
    with pytest.raises(ImportError, match=r"needs httpx: pip install 'simpletvm\[service\]'"):
        importlib.import_module("simpletvm.client")
    lazy = subprocess.run(
        [sys.executable, "-c", "import sys, simpletvm; print('httpx' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert lazy.stdout.strip() == "False"


def test_without_their_entry_point_the_service_commands_say_how_to_get_them(monkeypatch):
    """`simpletvm` finds the service's commands through the simpletvm.commands entry
    point; an install that registered none (an editable one made before it existed) still
    lists them, each naming the extra to install."""
    import typer

    from simpletvm.cli import extensions

    monkeypatch.setattr(extensions, "entry_points", lambda group: [])
    bare = typer.Typer()
    extensions.add_command_groups(bare)
    for command in ("serve", "submit", "jobs", "fetch"):
        result = CliRunner().invoke(bare, [command, "--help"])
        assert result.exit_code == 2, result.output
        assert f"`simpletvm {command}` comes with the service extra" in result.output
        assert "pip install 'simpletvm[service]'" in result.output
