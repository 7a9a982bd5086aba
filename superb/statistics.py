"""The statistics superb decides with: bootstrap intervals of medians (seeded, so a report
is the same every time it is made) and the verdict of two sets of timed calls, a rank
test and a smallest change worth naming together."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
# a difference the rank test finds less likely than this under "no change" is real
ALPHA = 0.05
MIN_EFFECT_PCT = 2.0


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
    """B against A: the change of the median (B/A - 1), the rank test's p-value and the
    word: "slower" or "faster" when the test finds a difference AND the change is at
    least the smallest effect asked for, else "same"."""

    change: float
    p_value: float
    verdict: str


def decide(a: list[float], b: list[float], min_effect_pct: float = MIN_EFFECT_PCT) -> Verdict:
    """Mann-Whitney U (two-sided, scipy.stats) on the timed calls of A and B, and the
    change of their medians held to ``min_effect_pct``."""
    from scipy.stats import mannwhitneyu

    if not len(a) or not len(b):
        return Verdict(float("nan"), float("nan"), "?")
    change = float(np.median(b) / np.median(a) - 1.0)
    p_value = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    if p_value < ALPHA and abs(change) * 100 >= min_effect_pct:
        return Verdict(change, p_value, "slower" if change > 0 else "faster")
    return Verdict(change, p_value, "same")


def halves(rounds: list[list[float]]) -> tuple[list[float], list[float]]:
    """The calls of the even rounds and of the odd ones: one experiment against itself,
    each half taking its turns through the same drift."""
    return (
        [c for r in rounds[0::2] for c in r],
        [c for r in rounds[1::2] for c in r],
    )
