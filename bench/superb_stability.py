"""Does a sweep pick the same winners when it is run again? A grid swept twice, each time
into a fresh store as a real ``python -m superb run`` process with its closing round;
then, for every pair of cells (peers included) whose 95% intervals do not overlap in a
sweep, whether the other sweep's medians order them the same way.

    python bench/superb_stability.py [examples/superb_mobilenet.yaml] [--sweeps 2]

Prints each sweep's wall time and closing-round table, then the pairs told apart and how
many of them the sweeps disagree on (the goal: none).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "grid", nargs="?", default=str(REPO / "examples" / "superb_mobilenet.yaml"), help="a grid"
    )
    parser.add_argument("--sweeps", type=int, default=2, help="how many times to sweep it")
    args = parser.parse_args()
    if args.sweeps < 2:
        parser.error("--sweeps must be at least 2")
    return args


def sweep(grid: str, store: Path):
    """One sweep of ``grid`` into ``store``; returns (its final.csv frame, seconds)."""
    from superb.final_round import read_final
    from superb.grid import load_grid
    from superb.results import Experiment

    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "superb", "run", grid, "--store", str(store), "--plain"]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"superb run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    name = load_grid(Path(grid)).name
    return read_final(Experiment(store / "superb" / name)), seconds


def told_apart(final) -> dict[tuple[str, str], bool]:
    """Per pair of timed cells whose intervals do not overlap: whether the first is faster."""
    timed = final[final["median_ms"].notna()]
    rows = {row["cell"]: row for _, row in timed.iterrows()}
    pairs = {}
    for a, b in itertools.combinations(sorted(rows), 2):
        x, y = rows[a], rows[b]
        if x["high_ms"] < y["low_ms"] or y["high_ms"] < x["low_ms"]:
            pairs[(a, b)] = bool(x["median_ms"] < y["median_ms"])
    return pairs


def cell_names(final) -> dict[str, str]:
    """Each cell's label: its peer, or its varying parameters."""
    from superb.verdicts import cell_label

    params = [c for c in final.columns if c.startswith("param:")]
    builds = final[final["kind"] != "peer"]  # a peer row has no parameters but the model
    varying = [c for c in params if builds[c].nunique(dropna=False) > 1]
    return {row["cell"]: cell_label(row, varying) for _, row in final.iterrows()}


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(REPO))
    finals = []
    for number in range(args.sweeps):
        with tempfile.TemporaryDirectory(prefix="superb-stability-") as store:
            final, seconds = sweep(args.grid, Path(store))
        names = cell_names(final)
        print(f"sweep {number + 1}: {seconds:.1f} s")
        for _, row in final.sort_values("median_ms").iterrows():
            print(
                f"  {names[row['cell']]:<28} {row['median_ms']:.4f} ms "
                f"[{row['low_ms']:.4f}, {row['high_ms']:.4f}]  {row['samples']} calls"
            )
        finals.append((final, names))
    disagreements = compared = 0
    for (one, names), (other, _) in itertools.permutations(finals, 2):
        medians = dict(zip(other["cell"], other["median_ms"], strict=True))
        for (a, b), faster in told_apart(one).items():
            compared += 1
            if (medians[a] < medians[b]) != faster:
                disagreements += 1
                print(f"  disagree: {names[a]} against {names[b]}")
    print(
        f"{compared} pairs told apart by a sweep (intervals apart), each held to the other "
        f"sweep's medians: {disagreements} ordered differently"
    )


if __name__ == "__main__":
    main()
