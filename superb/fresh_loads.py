"""Modules loaded anew for each closing round (:mod:`superb.final_round`), each from a
fresh copy of its saved directory.

Where a load places a module's code and weights in memory sets its speed for as long as
it stays loaded: a module loaded once carries one placement through every round of a
sweep, a bias the rounds cannot show and the next sweep does not share. Loaded again each
round, the placement becomes part of the spread between rounds, which the verdict's test
on rounds weighs (:func:`superb.statistics.decide`). Each load reads a copy in a
directory of its own, since the dynamic loader hands back the library it already holds
for a path instead of loading it again; the previous round's modules are let go (and
their copies deleted) before the next round loads, so memory does not grow with rounds.
"""

from __future__ import annotations

import gc
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class FreshLoads:
    """``sources``: per name, a saved module's directory; ``load(name, directory)``: its
    runner from the copy in ``directory`` (None when it does not load); ``scratch``:
    where each round's copies go, a subdirectory per round."""

    sources: dict[str, Path]
    load: Callable[[str, Path], Any]
    scratch: Path
    rounds: int = 0

    @contextmanager
    def round(self) -> Iterator[dict[str, Any]]:
        """A runner per name that loads, each from a fresh copy of its directory."""
        gc.collect()  # the previous round's modules, let go by whoever timed them
        directory = self.scratch / f"round-{self.rounds}"
        self.rounds += 1
        runners: dict[str, Any] = {}
        try:
            for number, (name, source) in enumerate(self.sources.items()):
                copy = directory / str(number)
                shutil.copytree(source, copy)
                runner = self.load(name, copy)
                if runner is not None:
                    runners[name] = runner
            yield runners
        finally:
            runners.clear()
            shutil.rmtree(directory, ignore_errors=True)
