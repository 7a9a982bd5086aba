"""Reading experiments back: a summary per parameter combination, and a comparison of
two experiments run by run."""

from __future__ import annotations

from dataclasses import dataclass

from .results import AGGREGATE_MEANS, Experiment, RunStatus, aggregate

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
    """Rebuild the experiment's CSVs from its log (when it has one) and aggregate."""
    if experiment.log_path.exists():
        runs, aggregated = experiment.write_csvs(by=by)
    else:
        from simpletvm.store import atomic_write_text

        runs = experiment.read_runs()
        aggregated = aggregate(runs, by)
        atomic_write_text(experiment.aggregate_csv, aggregated.to_csv(index=False))
    return Report(experiment, runs, aggregated)


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
}


def for_display(frame, metrics: dict[str, str] | None = None):
    """A frame to print: the parameters that vary, then ``metrics`` renamed (default:
    the summary's); returns it and the parameters that have one value throughout."""
    params = [c for c in frame.columns if c.startswith("param:")]
    constant = {
        c[6:]: frame[c].iloc[0]
        for c in params
        if len(frame) and frame[c].nunique(dropna=False) == 1
    }
    varying = [c for c in params if c[6:] not in constant]
    metrics = metrics if metrics is not None else SUMMARY_COLUMNS
    shown = frame[varying + [c for c in metrics if c in frame.columns]]
    renamed = {c: c[6:] for c in varying} | metrics
    return shown.rename(columns=renamed), constant
