"""A yardstick per closing round that cancels the host's drift between experiments: the
host runs faster or slower from one sweep to the next, alike for every cell of a round,
so each round's calls are divided by what that round measured of the host before cells
of two experiments (or two halves of one's rounds) are compared.

"peers": the geometric mean of the round medians of the peers timed on every side;
peers do not change with SimpleTVM's code, so a change slowing every SimpleTVM cell
alike still shows. Each peer is measured against the other peers; a lone peer is its
own yardstick and reads "same" by construction. "cells": the median of all cells' round
medians, robust to one cell changing, blind to a change slowing every cell alike.
"none": the raw calls."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

AUTO, PEERS, CELLS, NONE = "auto", "peers", "cells", "none"
CHOICES = (AUTO, PEERS, CELLS, NONE)

DESCRIPTIONS = {
    PEERS: "each round's calls over the geometric mean of the peers' round medians "
    "(each peer over the other peers'; a lone peer over its own, same by construction)",
    CELLS: "each round's calls over the median of all cells' round medians "
    "(a change slowing every cell alike does not show)",
    NONE: "raw calls (the host's drift between experiments shows as change)",
}


@dataclass(frozen=True)
class Scaled:
    """Each side's cells' rounds divided by the yardstick ``kind``, in the first side's ms,
    and ``drift``: the yardstick's median on the last side over the first's, less 1."""

    sides: list[list[list[list[float]]]]
    kind: str
    drift: float

    def describe(self) -> str:
        drift = f"; host drift {self.drift:+.1%}" if self.drift == self.drift else ""
        return f"yardstick: {self.kind}, {DESCRIPTIONS[self.kind]}{drift}"


def scaled(kinds: list[str], sides: list[list[list[list[float]]]], asked: str = AUTO) -> Scaled:
    """``sides`` (per experiment, per cell, per round, the calls; cells in the same order
    on every side, of ``kinds``) divided round by round by the yardstick ``asked``."""
    peers = [i for i, kind in enumerate(kinds) if kind == "peer" and all(s[i] for s in sides)]
    kind = _chosen(asked, bool(peers))
    if kind == NONE:
        return Scaled(sides, kind, float("nan"))
    every = [_per_round(side, range(len(kinds)), kind) for side in sides]
    if kind == CELLS:
        return Scaled(_divided(sides, lambda i: every), kind, _drift(every))
    of_peers = [_per_round(side, peers, kind) for side in sides]

    def yardstick_of(i: int) -> list[np.ndarray]:
        if kinds[i] != "peer":
            return of_peers
        others = [j for j in peers if j != i] or [i]
        return [_per_round(side, others, kind) for side in sides]

    return Scaled(_divided(sides, yardstick_of), kind, _drift(of_peers))


def _chosen(asked: str, have_peers: bool) -> str:
    if asked not in CHOICES:
        raise ValueError(f"unknown yardstick {asked!r}: one of {', '.join(CHOICES)}")
    if asked == PEERS and not have_peers:
        raise ValueError("yardstick peers: no peer was timed on every side")
    if asked == AUTO:
        return PEERS if have_peers else CELLS
    return asked


def _per_round(side: list[list[list[float]]], chosen, kind: str) -> np.ndarray:
    """The yardstick of each round: its chosen cells' round medians pooled (geometric mean
    for peers, median for cells); nan for a round none of them was timed in."""
    count = max((len(side[i]) for i in chosen), default=0)
    medians = np.full((len(chosen), count), np.nan)
    for row, i in enumerate(chosen):
        for r, calls in enumerate(side[i]):
            if calls:
                medians[row, r] = np.median(calls)
    out = np.full(count, np.nan)
    timed = ~np.isnan(medians).all(axis=0)
    if kind == PEERS:
        out[timed] = np.exp(np.nanmean(np.log(medians[:, timed]), axis=0))
    else:
        out[timed] = np.nanmedian(medians[:, timed], axis=0)
    return out


def _divided(sides, yardstick_of) -> list[list[list[list[float]]]]:
    """Every cell's rounds over its yardstick's rounds, times the first side's median
    yardstick so that the unit stays ms."""
    out = [[] for _ in sides]
    for i in range(len(sides[0])):
        per_side = yardstick_of(i)
        unit = _median(per_side[0])
        for s, side in enumerate(sides):
            out[s].append(_over(side[i], per_side[s], unit))
    return out


def _over(rounds: list[list[float]], yardstick: np.ndarray, unit: float) -> list[list[float]]:
    def factor(r: int) -> float:
        y = yardstick[r] if r < len(yardstick) else float("nan")
        return unit / y if y > 0 and unit == unit else 1.0

    return [[c * factor(r) for c in calls] for r, calls in enumerate(rounds)]


def _drift(per_side: list[np.ndarray]) -> float:
    return _median(per_side[-1]) / _median(per_side[0]) - 1.0 if len(per_side) > 1 else float("nan")


def _median(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else float("nan")
