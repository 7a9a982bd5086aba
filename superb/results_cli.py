"""superb's commands that read experiments back: ``report`` (a summary per parameter
combination, the closing round's ranking, its picture) and ``compare`` (two experiments
cell by cell, or one against itself). Registered on the app in :mod:`superb.cli`."""

from __future__ import annotations

from pathlib import Path

import typer

from simpletvm.console import make_console
from simpletvm.exit_codes import ExitCode

from .cli_support import STORE, bad_input
from .display import cell_text, print_frame


def report(
    experiment: str = typer.Argument(..., help="experiment directory or name"),
    store: Path | None = STORE,
    by: str | None = typer.Option(
        None, metavar="P1,P2", help="group by these parameters only (default: all)"
    ),
    plot: bool = typer.Option(
        False,
        "--plot",
        help="also draw the closing round to final.png beside the CSVs (needs matplotlib)",
    ),
):
    """Print a summary per parameter combination and write aggregate.csv; then the
    closing round's cells by median, marking those the best cannot be told from."""
    from .report import make_report
    from .results import Experiment

    if plot:
        from .plot import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as error:
            raise bad_input([error]) from error
    try:
        the_report = make_report(Experiment.find(experiment, store), by.split(",") if by else None)
    except (FileNotFoundError, ValueError) as error:
        raise bad_input([error]) from error
    from .report import for_display

    console = make_console(unwrapped=True)
    shown, constant = for_display(the_report.aggregate)
    print_frame(
        console,
        shown,
        f"{the_report.experiment.dir.name}: {len(the_report.runs)} runs (means over ok runs)",
    )
    if constant:
        console.print("all runs: " + ", ".join(f"{n}={cell_text(v)}" for n, v in constant.items()))
    if "speedup" in the_report.aggregate.columns:
        console.print(
            "speed-up: the untuned twin's median over the tuned one's (below 1: tuning made "
            "it slower); flag: slower beyond the timing's noise (its 95% interval, runs and "
            "their calls resampled, below 1), or within it"
            + (
                "; one run a side cannot show the host's drift between runs "
                "(repetitions: 3 in the grid does)"
                if (the_report.aggregate["runs"] < 2).any()
                else ""
            ),
            soft_wrap=True,
        )
    failures = the_report.failures
    for _, row in failures.iterrows():
        console.print(f"failed #{row['index']} {row['run']}: {row['error']}")
    console.print(f"aggregate {the_report.experiment.aggregate_csv}")
    _final_report(console, the_report.experiment, plot)


def _final_report(console, experiment, plot: bool) -> None:
    """The closing round's table (when the experiment has one) and, with ``plot``, its PNG."""
    from .display import print_final
    from .final_round import FINAL_CSV, read_final

    try:
        final = read_final(experiment)
    except FileNotFoundError:
        if plot:
            raise bad_input([f"nothing to plot: {experiment.dir} has no {FINAL_CSV}"]) from None
        return
    print_final(console, final, experiment.dir / FINAL_CSV)
    if plot:
        from .plot import PLOT_PNG, plot_final

        path = plot_final(final, experiment.dir / PLOT_PNG, f"{experiment.dir.name}: closing round")
        console.print(f"plot      {path}")


def compare(
    a: str = typer.Argument(..., help="baseline experiment (directory or name)"),
    b: str | None = typer.Argument(
        None, help="experiment to compare with it (none: A against itself, its noise band)"
    ),
    store: Path | None = STORE,
    metric: str = typer.Option(
        "eval_median_ms", help="without a closing round on both sides: the column to compare"
    ),
    min_effect: float = typer.Option(
        2.0, min=0, metavar="PCT", help="smallest change (percent) called faster or slower"
    ),
    fail_on_regression: float | None = typer.Option(
        None,
        min=0,
        metavar="PCT",
        help="exit 1 when a cell is slower beyond noise and by more than PCT percent",
    ),
    yardstick: str = typer.Option(
        "auto",
        metavar="auto|peers|cells|none",
        help="what each round's calls are divided by, cancelling the host's drift between "
        "experiments (auto: peers when both timed one, else cells; none: raw calls)",
    ),
):
    """Compare two experiments cell by cell, matched on their parameters.

    With the closing round's samples on both sides (final.csv), each round's median is
    one sample: a cell is faster or slower when a Mann-Whitney U test on its round
    medians (scipy.stats, two-sided, p below 0.05) finds a difference AND its median
    round moved by at least --min-effect; else same; "?" with fewer than 2 rounds a side.
    Rounds, not calls, are the samples: a round's calls share its load of the module
    (where its code and weights landed in memory) and the host's state of the moment,
    which more calls do not average away. With one experiment, two interleaved halves of
    its rounds (0, 3, 4, 7, ... against 1, 2, 5, 6, ...: each as many rounds in the
    plan's order as in reverse) against each other: the noise band a change must beat on this host. Without a closing
    round, the runs' means of --metric are compared, a change within --min-effect being
    "same".

    The host's speed drifts between sweeps, so before deciding, each round's calls are
    divided by a yardstick of that round (--yardstick), in A's ms: "peers", the geometric
    mean of the round medians of the peers both experiments timed (a change slowing every
    SimpleTVM cell alike still shows; each peer goes over the other peers, a lone one over
    itself and so reads same); "cells", the median of all cells' round medians (robust to
    one cell changing, blind to a change slowing every cell alike); "none", raw calls.
    The line "yardstick: ..." says which was used and the host's drift it measured."""
    from .final_round import read_final
    from .results import Experiment
    from .yardstick import CHOICES

    if yardstick not in CHOICES:
        raise bad_input([f"--yardstick {yardstick}: one of {', '.join(CHOICES)}"])
    try:
        first = Experiment.find(a, store)
        second = Experiment.find(b, store) if b is not None else None
        finals = [read_final(e) for e in (first, second) if e is not None]
    except FileNotFoundError as error:
        if b is None or "no final.csv" not in str(error):
            raise bad_input([error]) from error
        finals = None
    console = make_console(unwrapped=True)
    try:
        if b is None:
            frame = _self_band(console, a, finals[0], min_effect, yardstick)
        elif finals:
            frame = _compare_final(console, a, b, finals, min_effect, yardstick)
        else:
            frame = _compare_runs(console, first, second, a, b, metric, min_effect)
    except ValueError as error:
        raise bad_input([error]) from error
    if fail_on_regression is not None:
        from .verdicts import regressions

        slower = regressions(frame, fail_on_regression)
        if slower:
            console.print(
                f"regression beyond noise and {fail_on_regression:g}%: " + "; ".join(slower),
                soft_wrap=True,
            )
            raise typer.Exit(ExitCode.FAILED)
        console.print(f"no cell slower beyond noise and {fail_on_regression:g}%")


def _self_band(console, name: str, final, min_effect: float, yardstick: str):
    from .verdicts import self_band

    frame, scale = self_band(final, min_effect, yardstick)
    _print_verdicts(
        console, frame, f"{name}: rounds 0, 3, 4, 7, ... (A) against rounds 1, 2, 5, 6, ... (B)"
    )
    console.print(scale.describe(), soft_wrap=True)
    if len(frame):
        console.print(
            f"noise band: changes up to {frame['change'].abs().max():.1%} with no change made"
        )
    return frame


def _compare_final(console, a: str, b: str, finals, min_effect: float, yardstick: str):
    from .verdicts import compare_final

    frame, unmatched, scale = compare_final(finals[0], finals[1], min_effect, yardstick)
    _print_verdicts(
        console,
        frame,
        f"closing rounds: {a} -> {b} (Mann-Whitney U on the round medians, p < 0.05, "
        f"and at least {min_effect:g}%)",
    )
    console.print(scale.describe(), soft_wrap=True)
    _print_unmatched(console, unmatched)
    return frame


def _compare_runs(console, first, second, a: str, b: str, metric: str, min_effect: float):
    from .report import compare as compare_experiments
    from .report import for_display

    frame, unmatched = compare_experiments(first, second, metric, min_effect / 100)
    shown = frame.assign(change=[f"{c:+.1%}" if c == c else "?" for c in frame["change"]])
    shown, _ = for_display(
        shown, {f"{metric}_a": "A", f"{metric}_b": "B", "change": "change", "verdict": "verdict"}
    )
    print_frame(
        console,
        shown,
        f"{metric}: {a} -> {b} (no closing round: means, within {min_effect:g}% same)",
    )
    _print_counts(console, shown)
    _print_unmatched(console, unmatched)
    return frame.assign(verdict=frame["verdict"].replace({"higher": "slower"}))


def _print_verdicts(console, frame, title: str) -> None:
    from .report import for_display

    shown = frame.assign(
        change=[f"{c:+.1%}" if c == c else "?" for c in frame["change"]],
        p_value=[f"{p:.3g}" if p == p else "?" for p in frame["p_value"]],
    )
    metrics = {
        "kind": "kind",
        "peer": "peer",
        "median_ms_a": "A ms",
        "median_ms_b": "B ms",
        "change": "change",
        "p_value": "p",
        "verdict": "verdict",
    }
    shown, _ = for_display(shown, metrics)
    print_frame(console, shown, title)
    _print_counts(console, shown)
    from .verdicts import cell_label, varying_params

    varying = varying_params(frame)
    for _, row in frame[frame["verdict"] == "?"].iterrows():
        console.print(f"? {cell_label(row, varying)}: {row['reason']}", soft_wrap=True)


def _print_counts(console, shown) -> None:
    counts = shown["verdict"].value_counts().to_dict()
    console.print(", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no cells matched")


def _print_unmatched(console, unmatched) -> None:
    if unmatched["only_a"] or unmatched["only_b"]:
        console.print(
            f"unmatched: {unmatched['only_a']} only in A, {unmatched['only_b']} only in B"
        )
