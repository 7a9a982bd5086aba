"""superb --help is instant: the CLI module imports neither TVM nor pandas."""

from __future__ import annotations

import subprocess
import sys

from superb_helpers import REPO, superb_command, superb_env

HEAVY = ("tvm", "tensorflow", "pandas", "numpy", "simpletvm", "onnx", "keras")
# the exit codes, the option vocabulary, the extras' names, the console plumbing the
# CLIs share and the package's loader of names on first use (standard library only)
LIGHT = (
    "simpletvm",
    "simpletvm.exit_codes",
    "simpletvm.cli_options",
    "simpletvm.extras",
    "simpletvm.console",
    "simpletvm.lazy",
)


def test_cli_import_is_light():
    code = (
        "import sys, superb.cli; heavy = [m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r} and m not in {LIGHT!r}]; print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=superb_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_help_lists_the_commands():
    result = subprocess.run(
        superb_command("--help"),
        cwd=REPO,
        env=superb_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for command in ("run", "plan", "report", "compare", "tracker", "server", "parameters"):
        assert command in result.stdout
    run_help = subprocess.run(
        superb_command("run", "--help"),
        cwd=REPO,
        env=superb_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    for option in ("--param", "--fail-fast", "--tracker", "--store", "--run-timeout", "--peers"):
        assert option in run_help.stdout


def test_run_defaults_to_the_closing_rounds_own_count_of_rounds():
    """The CLI writes the count out (importing the round would make it heavy)."""
    import inspect

    from superb.cli import run
    from superb.final_round import ROUNDS

    assert inspect.signature(run).parameters["rounds"].default.default == ROUNDS
