"""The closing round as a picture: each cell's median with its interval as an error bar,
the peers as horizontal lines across, written beside the experiment's CSVs (and shown by
notebooks/superb_analysis.ipynb). matplotlib is optional: without it, ImportError names
what to install. Drawn on a figure of its own (Agg canvas), so no pyplot backend is set
or needed."""

from __future__ import annotations

from pathlib import Path

from simpletvm.extras import install_hint

PLOT_PNG = "final.png"


def require_matplotlib() -> None:
    """Raise ImportError naming the install when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401 - only whether it imports
    except ImportError as error:
        raise ImportError(
            f"--plot needs matplotlib: {install_hint('analysis')} (or pip install matplotlib)"
        ) from error


def plot_final(final, path: Path, title: str) -> Path:
    """Draw ``final`` (final.csv's frame) to ``path``: the SimpleTVM cells in the order
    given, their medians with [low, high] error bars, each timed peer a dashed line."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .verdicts import cell_label

    cells = final[(final["kind"] == "simpletvm") & final["median_ms"].notna()]
    peers = final[(final["kind"] == "peer") & final["median_ms"].notna()]
    figure = Figure(figsize=(max(6.0, 1.2 * len(cells) + 2), 4.5), layout="tight")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    x = range(len(cells))
    axes.errorbar(
        list(x),
        cells["median_ms"],
        yerr=[cells["median_ms"] - cells["low_ms"], cells["high_ms"] - cells["median_ms"]],
        fmt="o",
        capsize=4,
        label="SimpleTVM (median, 95% interval)",
    )
    axes.set_xticks(list(x))
    params = [c for c in cells.columns if c.startswith("param:")]
    varying = [c for c in params if cells[c].nunique(dropna=False) > 1]
    labels = [_short(cell_label(row, varying)) for _, row in cells.iterrows()]
    axes.set_xticklabels(labels, rotation=20, ha="right")
    for i, (_, peer) in enumerate(peers.iterrows()):
        axes.axhline(
            peer["median_ms"],
            linestyle="--",
            color=f"C{i + 1}",
            label=f"{peer['peer']} ({_short(str(peer['param:model']))})",
        )
    axes.set_ylabel("latency (ms)")
    axes.set_ylim(bottom=0)
    axes.set_title(title)
    axes.legend(fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def _short(text: str, limit: int = 40) -> str:
    text = text.replace(str(Path.home()), "~")
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]
