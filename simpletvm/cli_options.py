"""The options `simpletvm` and `superb` share, worded and bounded once: the run store,
threads, the tuning budget, and what ``--verbose`` means. Also the help's look: a flag
shows no type (``--verbose``, not ``--verbose <bool>``).

Imports Typer only, so either CLI's ``--help`` stays instant."""

from __future__ import annotations

MIN_MINUTES = 0.01  # the smallest --minutes of simpletvm's commands and minutes of a grid
STORE_HELP = "run store root (default: $SIMPLETVM_HOME or ~/tvm-benchmark)"
THREADS_HELP = (
    "run (and tune) on this many threads (default: tune on the physical cores, "
    "run on the faster of every core and one)"
)
MINUTES_HELP = (
    "wall-clock budget of the tuning, the timing inside the model after its search "
    "included (not the import before it)"
)
VERBOSE_HELP = (
    "show native libraries' log lines (TVM, TensorFlow, TFLite) on the terminal; "
    "without it they go to the run's log"
)


def flags_without_type() -> None:
    """Typer's rich help prints a flag's type (``<bool>``); a flag takes no value, so it
    shows none. Applied once, at the import of a CLI."""
    from typer.core import TyperOption

    if getattr(TyperOption, "_flags_without_type", False):
        return
    shown = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich
    TyperOption._flags_without_type = True
