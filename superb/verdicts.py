"""What the closing rounds say (:mod:`superb.final_round`'s final.csv): a sweep's cells
ranked, with those the best cannot be told from; two experiments compared cell by cell,
each verdict a test on the rounds' medians and a smallest effect
(:func:`superb.statistics.decide`); and one experiment against itself, two interleaved halves of its rounds
against its odd ones, the noise band a comparison has to beat. Before deciding, each
round's calls are divided by a yardstick of that round (:mod:`superb.yardstick`),
cancelling the host's drift."""

from __future__ import annotations

from .statistics import MIN_EFFECT_PCT, decide, halves, round_medians
from .yardstick import AUTO, scaled

INDISTINGUISHABLE = "indistinguishable from the best"


def ranked(final):
    """final.csv's timed cells by median, each marked "best", INDISTINGUISHABLE (its
    interval overlaps the best's) or left blank; the cells not timed last."""
    timed = final[final["median_ms"].notna()].sort_values("median_ms", kind="stable")
    frame = timed.copy()
    frame["vs_best"] = ""
    if len(frame):
        best = frame.iloc[0]
        overlaps = frame["low_ms"] <= best["high_ms"]
        frame.loc[overlaps, "vs_best"] = INDISTINGUISHABLE
        frame.iloc[0, frame.columns.get_loc("vs_best")] = "best"
    untimed = final[final["median_ms"].isna()].assign(vs_best="")
    import pandas as pd

    return pd.concat([frame, untimed], ignore_index=True)


def match_keys(frame) -> list[str]:
    """The columns a cell is matched on across experiments: kind, peer, parameters."""
    return ["kind", "peer"] + [c for c in frame.columns if c.startswith("param:")]


def compare_final(a, b, min_effect_pct: float = MIN_EFFECT_PCT, yardstick: str = AUTO):
    """Cells of two final.csv frames matched on :func:`match_keys` (parameters one side
    does not have must be constant on the other), each with A's and B's median, the
    change, the p-value and the verdict, their calls over the ``yardstick`` of the matched
    cells (medians: of the rounds' medians). Returns (frame, unmatched counts, the
    :class:`superb.yardstick.Scaled`)."""
    keys = [c for c in match_keys(a) if c in b.columns]
    for frame in (a, b):
        own = [c for c in match_keys(frame) if c not in keys]
        varying = [c for c in own if frame[c].nunique(dropna=False) > 1]
        if varying:
            raise ValueError(
                f"cannot match cells: {[c[6:] for c in varying]} varies in one experiment "
                "and is not set in the other"
            )
    left, right = _keyed(a, keys), _keyed(b, keys)
    merged = left.merge(right, on="_key", how="outer", suffixes=("_a", "_b"), indicator=True)
    matched = merged[merged["_merge"] == "both"].reset_index(drop=True)
    sides = [list(matched["rounds_ms_a"]), list(matched["rounds_ms_b"])]
    scale = scaled(list(matched["kind_a"]), sides, yardstick)
    rows = []
    for (_, row), rounds_a, rounds_b in zip(matched.iterrows(), *scale.sides, strict=True):
        verdict = decide(rounds_a, rounds_b, min_effect_pct)
        rows.append(_row(row, keys, "_a", _median(rounds_a), _median(rounds_b), verdict))
    unmatched = {
        "only_a": int((merged["_merge"] == "left_only").sum()),
        "only_b": int((merged["_merge"] == "right_only").sum()),
    }
    return _frame(rows, keys), unmatched, scale


def self_band(final, min_effect_pct: float = MIN_EFFECT_PCT, yardstick: str = AUTO):
    """Each timed cell of one experiment, two interleaved halves of its rounds
    (:func:`superb.statistics.halves`) against each other,
    their calls over the ``yardstick`` of its cells: the changes no code change made, so
    what a comparison of this host's runs must beat. Returns (frame, the Scaled)."""
    keys = match_keys(final)
    timed = final[final["rounds"].fillna(0) >= 2]
    scale = scaled(list(timed["kind"]), [list(timed["rounds_ms"])], yardstick)
    rows = []
    for (_, row), rounds in zip(timed.iterrows(), scale.sides[0], strict=True):
        first, second = halves(rounds)
        verdict = decide(first, second, min_effect_pct)
        rows.append(_row(row, keys, "", _median(first), _median(second), verdict))
    return _frame(rows, keys), scale


def regressions(frame, fail_pct: float) -> list[str]:
    """The cells of a comparison found slower beyond noise and by more than ``fail_pct``."""
    slower = frame[(frame["verdict"] == "slower") & (frame["change"] * 100 > fail_pct)]
    varying = varying_params(frame)
    return [cell_label(row, varying) for _, row in slower.iterrows()]


def varying_params(frame) -> list[str]:
    """The ``param:`` columns of ``frame`` holding more than one value: what tells its
    cells apart."""
    params = [c for c in frame.columns if c.startswith("param:")]
    return [c for c in params if frame[c].nunique(dropna=False) > 1]


def cell_label(row, columns: list[str] | None = None) -> str:
    """A cell as a person names it: its peer, or its parameters (``columns``: only these)."""
    columns = columns if columns is not None else [c for c in row.index if c.startswith("param:")]
    from .display import cell_text

    params = [
        f"{c[6:]}={cell_text(row[c])}" for c in columns if c in row.index and row[c] == row[c]
    ]
    head = f"{row['peer']} on " if row.get("kind") == "peer" else ""
    return head + (", ".join(params) or "all")


def _keyed(frame, keys: list[str]):
    work = frame.copy()
    work["_key"] = work[keys].map(str).agg("|".join, axis=1) if keys else "all"
    return work


def _median(rounds: list[list[float]]) -> float:
    import numpy as np

    medians = round_medians(rounds)
    return float(np.median(medians)) if len(medians) else float("nan")


def _row(row, keys: list[str], suffix: str, median_a, median_b, verdict) -> dict:
    return {key: row[f"{key}{suffix}"] for key in keys} | {
        "median_ms_a": median_a,
        "median_ms_b": median_b,
        "change": verdict.change,
        "p_value": verdict.p_value,
        "verdict": verdict.verdict,
        "reason": verdict.reason,
    }


def _frame(rows: list[dict], keys: list[str]):
    import pandas as pd

    columns = keys + ["median_ms_a", "median_ms_b", "change", "p_value", "verdict", "reason"]
    return pd.DataFrame(rows, columns=columns)
