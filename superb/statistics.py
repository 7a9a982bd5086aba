"""The statistics superb decides with: bootstrap intervals of medians (seeded, so a report
is the same every time it is made) and the verdict of two sets of closing rounds, a test
on the rounds' medians and a smallest change worth naming together.

The verdict's samples are rounds, not calls: a round's calls share that round's state of
the host and that round's load of the module (where its code and weights were placed in
memory), a bias no number of calls averages away, so thousands of calls would make any
such bias "significant". Each round's median is one independent sample."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
# a difference the test on rounds finds less likely than this under "no change" is real
ALPHA = 0.05
MIN_EFFECT_PCT = 2.0
# round medians whose logs all lie this close are one value (a float's rounding apart)
SAME_LOG = 1e-9


def bootstrap_medians(groups: list[list[float]], rng, resamples: int = RESAMPLES) -> np.ndarray:
    """``resamples`` medians of ``groups`` (runs, or rounds, of timed calls) pooled:
    groups resampled, then each group's calls, so the drift between groups widens the
    spread as much as the noise within them."""
    arrays = [np.asarray(calls, dtype=float) for calls in groups]
    picks = rng.integers(0, len(arrays), size=(resamples, len(arrays)))
    out = np.empty(resamples)
    for b, chosen in enumerate(picks):
        pooled = np.concatenate([rng.choice(arrays[i], size=len(arrays[i])) for i in chosen])
        out[b] = np.median(pooled)
    return out


def interval(values: np.ndarray) -> tuple[float, float]:
    """The CONFIDENCE interval of bootstrapped ``values`` (percentiles)."""
    tail = (1 - CONFIDENCE) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def median_interval(rounds: list[list[float]], seed: int = 0) -> tuple[float, float, float]:
    """The median of every call of ``rounds`` and its CONFIDENCE interval, rounds and
    then their calls resampled. (nan, nan, nan) without samples."""
    calls = [c for r in rounds for c in r]
    if not calls:
        return float("nan"), float("nan"), float("nan")
    low, high = interval(bootstrap_medians([r for r in rounds if r], np.random.default_rng(seed)))
    return float(np.median(calls)), low, high


@dataclass(frozen=True)
class Verdict:
    """B against A: the change of the median round (B/A - 1), the test's p-value and the
    word: "slower" or "faster" when the test finds a difference AND the change is at
    least the smallest effect asked for, else "same"; "?" when a side has fewer than two
    rounds, ``reason`` saying so."""

    change: float
    p_value: float
    verdict: str
    reason: str = ""


def decide(
    a: list[list[float]], b: list[list[float]], min_effect_pct: float = MIN_EFFECT_PCT
) -> Verdict:
    """Mann-Whitney U (two-sided, scipy.stats) on the round medians of A and of B (``a``,
    ``b``: rounds of timed calls), and the change of the median round held to
    ``min_effect_pct``. A rank test, since a round disturbed by the host (or by where a
    load placed the module) is an outlier that a test on means would let widen the noise."""
    from scipy.stats import mannwhitneyu

    medians_a, medians_b = round_medians(a), round_medians(b)
    if len(medians_a) < 2 or len(medians_b) < 2:
        change = _change(medians_a, medians_b) if len(medians_a) and len(medians_b) else np.nan
        reason = f"fewer than 2 timed rounds a side ({len(medians_a)} and {len(medians_b)})"
        return Verdict(float(change), float("nan"), "?", reason)
    change = _change(medians_a, medians_b)
    logs = np.log(np.concatenate([medians_a, medians_b]))
    if np.ptp(logs) < SAME_LOG:  # a cell that is its own yardstick
        return Verdict(change, 1.0, "same")
    p_value = float(mannwhitneyu(medians_a, medians_b, alternative="two-sided").pvalue)
    if p_value < ALPHA and abs(change) * 100 >= min_effect_pct:
        return Verdict(change, p_value, "slower" if change > 0 else "faster")
    return Verdict(change, p_value, "same")


def round_medians(rounds: list[list[float]]) -> np.ndarray:
    """The median of each round that timed calls."""
    return np.array([np.median(calls) for calls in rounds if len(calls)], dtype=float)


def _change(medians_a: np.ndarray, medians_b: np.ndarray) -> float:
    return float(np.median(medians_b) / np.median(medians_a) - 1.0)


def halves(rounds: list[list[float]]) -> tuple[list[list[float]], list[list[float]]]:
    """One experiment's rounds in two interleaved halves, to test it against itself:
    rounds 0, 3, 4, 7, 8, ... and rounds 1, 2, 5, 6, ... Each half takes its turns
    through the same drift and holds as many rounds in the plan's order (even rounds) as
    in reverse (odd ones), since a contestant's place in the order moves its timing and
    would otherwise show as a change."""
    first = [r for number, r in enumerate(rounds) if number % 4 in (0, 3)]
    second = [r for number, r in enumerate(rounds) if number % 4 in (1, 2)]
    return first, second
