"""The ``simpletvm`` command: a quickstart, the runs in the store, one model at a time
(tune, compile, run, benchmark) in the manner of TVM's former ``tvmc``, and the commands
other packages add (the tuning service's, :mod:`simpletvm.cli.extensions`).

A module per verb registers its commands on :data:`app` (:mod:`simpletvm.cli.program`);
:mod:`simpletvm.cli.guard` decides how each ends (its exit code, its run kept or not).
Only Typer, the exit codes and the console's plumbing load with it; SimpleTVM, TVM and
numpy load when a command needs them, so ``simpletvm --help`` is instant. Messages print without Rich
markup: an error's text or a path may hold brackets (``'simpletvm[bench]'``) that must
reach the user as written.
"""

from __future__ import annotations

import importlib

from simpletvm.cli.extensions import add_command_groups
from simpletvm.cli.program import app
from simpletvm.exit_codes import honour_ctrl_c, relay_ctrl_c

# each verb's module registers its commands as it is imported: in the order --help lists
for _verb in ("quickstart", "runs", "model", "benchmark"):
    importlib.import_module(f"simpletvm.cli.{_verb}")
add_command_groups(app)


def main() -> None:
    """The ``simpletvm`` program. Ctrl-C stops it even when it was started with SIGINT
    ignored, as background shells and test runners start programs (see honour_ctrl_c)."""
    honour_ctrl_c()
    relay_ctrl_c()
    app()
