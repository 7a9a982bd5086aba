"""Reading experiments back: a summary per parameter combination, and a comparison of
two experiments run by run."""

from __future__ import annotations

from dataclasses import dataclass

from .parameters import PARAMETERS
from .results import AGGREGATE_MEANS, Experiment, RunStatus, aggregate, read_context
from .statistics import bootstrap_medians, interval

COMPARE_METRICS = AGGREGATE_MEANS


@dataclass
class Report:
    experiment: Experiment
    runs: object  # pandas DataFrame, one row per run
    aggregate: object  # pandas DataFrame, one row per parameter combination

    @property
    def failures(self):
        return self.runs[self.runs["status"] != RunStatus.OK]


def make_report(experiment: Experiment, by: list[str] | None = None) -> Report:
    """Rebuild the experiment's CSVs from its log (when it has one) and aggregate; each
    tuned combination gets its speed-up over its untuned twin (:func:`with_speedups`)."""
    if experiment.log_path.exists():
        runs, aggregated = experiment.write_csvs(by=by)
    else:
        from simpletvm.store import atomic_write_text

        runs = experiment.read_runs()
        aggregated = aggregate(runs, by)
        atomic_write_text(experiment.aggregate_csv, aggregated.to_csv(index=False))
    return Report(experiment, runs, with_speedups(aggregated, runs))


def _untuned(value) -> bool:
    return str(value).strip().lower() in ("false", "0", "no")


def with_speedups(aggregated, runs):
    """``aggregated`` with, on each tuned row that has an untuned twin (the same
    parameters but the tuning ones), ``speedup``: the twin's median latency over the
    row's (above 1: tuning made it faster), and ``flag``: "slower" when tuning made it
    slower beyond the timing's noise (the speed-up's interval, :func:`speedup_interval`,
    lies below 1), "slower, within noise" when the interval reaches 1; ``speedup_low``
    and ``speedup_high`` hold the interval."""
    frame = aggregated.copy()
    if "param:autotune" not in frame.columns or "param:autotune" not in runs.columns:
        return frame
    tuning = {f"param:{n}" for n, p in PARAMETERS.items() if p.call == "autotune"}
    keys = [c for c in frame.columns if c.startswith("param:") and c not in tuning]
    ok = runs[runs["status"] == RunStatus.OK]
    for column in ("speedup", "speedup_low", "speedup_high"):
        frame[column] = float("nan")
    frame["flag"] = ""
    untuned = frame[frame["param:autotune"].map(_untuned)]
    for index, row in frame.iterrows():
        if _untuned(row["param:autotune"]):
            continue
        same = (untuned[keys].astype(str) == row[keys].astype(str)).all(axis=1)
        twins = untuned[same] if keys else untuned
        if len(twins) != 1:
            continue
        twin = twins.iloc[0]
        frame.loc[index, "speedup"] = twin["eval_median_ms"] / row["eval_median_ms"]
        low, high = speedup_interval(_samples(ok, twin, keys), _samples(ok, row, keys))
        frame.loc[index, ["speedup_low", "speedup_high"]] = [low, high]
        if frame.loc[index, "speedup"] < 1:
            frame.loc[index, "flag"] = "slower" if high < 1 else "slower, within noise"
    return frame


def _samples(ok_runs, row, keys: list[str]) -> list[list[float]]:
    """The timed calls (ms) of each ok run of ``row``'s combination, from its context."""
    mine = ok_runs[ok_runs["param:autotune"].map(_untuned) == _untuned(row["param:autotune"])]
    if keys:
        mine = mine[(mine[keys].astype(str) == row[keys].astype(str)).all(axis=1)]
    found = []
    for path in mine["context"]:
        evaluation = (read_context(path) or {}).get("evaluation") or {}
        if evaluation.get("samples_ms"):
            found.append(list(evaluation["samples_ms"]))
    return found


def speedup_interval(before: list[list[float]], after: list[list[float]], seed: int = 0):
    """A CONFIDENCE interval of median(before) / median(after), each side a list of runs'
    timed calls: runs resampled, then each run's calls (a host's drift between runs
    shows only with several runs a side). (nan, nan) without samples."""
    import numpy as np

    if not before or not after:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    return interval(bootstrap_medians(before, rng) / bootstrap_medians(after, rng))


def compare(a: Experiment, b: Experiment, metric: str = "eval_median_ms", threshold: float = 0.05):
    """Match the runs of two experiments on their common parameters and compare
    ``metric`` (means over repetitions of ok runs); a relative change within
    ``threshold`` is noise ("same"). Returns (frame, unmatched counts)."""
    import pandas as pd

    if metric not in COMPARE_METRICS:
        raise ValueError(f"unknown metric {metric!r}: choose one of {list(COMPARE_METRICS)}")
    runs_a, runs_b = a.read_runs(), b.read_runs()
    params_a = [c for c in runs_a.columns if c.startswith("param:")]
    params_b = [c for c in runs_b.columns if c.startswith("param:")]
    common = [c for c in params_a if c in params_b]
    # a parameter only one side sets must have one value there, or runs cannot match
    for runs, own in ((runs_a, params_a), (runs_b, params_b)):
        varying = [c for c in own if c not in common and runs[c].nunique(dropna=False) > 1]
        if varying:
            raise ValueError(
                f"cannot match runs: {[c[6:] for c in varying]} varies in one "
                "experiment and is not set in the other"
            )
    by = [c[6:] for c in common]
    left = _means(runs_a, by, metric)
    right = _means(runs_b, by, metric)
    keys = common or ["_all"]
    merged = left.merge(right, on=keys, how="outer", suffixes=("_a", "_b"), indicator=True)
    matched = merged[merged["_merge"] == "both"].copy()
    unmatched = {
        "only_a": int((merged["_merge"] == "left_only").sum()),
        "only_b": int((merged["_merge"] == "right_only").sum()),
    }
    matched["change"] = matched[f"{metric}_b"] / matched[f"{metric}_a"] - 1.0
    matched["verdict"] = [
        "?"
        if pd.isna(change)
        else "same"
        if abs(change) <= threshold
        else ("lower" if change < 0 else "higher")
        for change in matched["change"]
    ]
    columns = common + [f"{metric}_a", f"{metric}_b", "change", "verdict"]
    return matched[columns].reset_index(drop=True), unmatched


def _means(runs, by: list[str], metric: str):
    frame = aggregate(runs, by)
    if not by:
        return frame.assign(_all=1)[["_all", metric]]
    return frame[[f"param:{name}" for name in by] + [metric]]


SUMMARY_COLUMNS = {
    "runs": "runs",
    "failed": "failed",
    "tuning_s": "tuning s",
    "trials": "trials",
    "select_mean_s": "select s",
    "build_mean_s": "build s",
    "profile_mean_s": "profile s",
    "update_mean_s": "update s",
    "eval_median_ms": "median ms",
    "eval_p90_ms": "p90 ms",
    "eval_median_ms_std": "median sd",
    "speedup": "speed-up",
    "flag": "flag",
}


def for_display(frame, metrics: dict[str, str] | None = None):
    """A frame to print: the parameters that vary, then ``metrics`` renamed (default:
    the summary's); returns it and the parameters that have one value throughout. A
    parameter named like a metric's column keeps its ``param:`` name, so that both show."""
    params = [c for c in frame.columns if c.startswith("param:")]
    constant = {
        c[6:]: frame[c].iloc[0]
        for c in params
        if len(frame) and frame[c].nunique(dropna=False) == 1
    }
    varying = [c for c in params if c[6:] not in constant]
    metrics = metrics if metrics is not None else SUMMARY_COLUMNS
    shown = frame[varying + [c for c in metrics if c in frame.columns]]
    labels = set(metrics.values())
    renamed = {c: c[6:] for c in varying if c[6:] not in labels} | metrics
    return shown.rename(columns=renamed), constant
