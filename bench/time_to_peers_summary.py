"""Every ``bench/time_to_peers.py`` run kept under a directory, summed up against the
targets the tool aims at, per host kind (LLVM's cpu name), model and store (cold, warm):
how many runs, the median and range of each checkpoint's latency over the fastest peer,
and in how many runs each target was met.

    python bench/time_to_peers_summary.py [DIR] [--host znver5] [--since-seed N] [--markdown]

Targets (ratios to the fastest peer, timed in the same rounds): untuned at most 2.0x;
cold at most 1.0x at 5 minutes and 0.8x at 15; warm at most 1.0x at 2 minutes; no
checkpoint measured slower than an earlier one of its run; measured within 5% of the
estimate timed inside the model at every tuned checkpoint. A run without a checkpoint
(a 5-minute run has no 15) does not count for its target. The host's state moves these
ratios within minutes (``bench/common/host.py``), so a single run says little; this is
the spread.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

UNTUNED_AT_MOST = 2.0
COLD_AT_MOST = {5.0: 1.0, 15.0: 0.8}
WARM_AT_MOST = {2.0: 1.0}
ESTIMATE_WITHIN = 0.05
SIGNIFICANT = 0.05  # a one-sided sign test's p-value below which a step counts as slower


def runs_under(directory: Path) -> list[dict]:
    """Every run in the result files under ``directory`` (each file a list of runs)."""
    runs = []
    for path in sorted(directory.rglob("time-to-peers-*.json")):
        for run in json.loads(path.read_text()):
            run["file"] = str(path.relative_to(directory))
            runs.append(run)
    return runs


def ratios_at(run: dict) -> dict[float, float]:
    return {c["minutes"]: c["x_fastest_peer"] for c in run["checkpoints"]}


def within_estimate(run: dict) -> bool | None:
    """Measured within ESTIMATE_WITHIN of the in-model estimate at every tuned checkpoint;
    None for a run made before the in-model estimate existed."""
    ratios = [c.get("measured_over_in_model") for c in run["checkpoints"] if c["minutes"] > 0]
    if not ratios or any(r is None for r in ratios):
        return None
    return all(abs(r - 1) <= ESTIMATE_WITHIN for r in ratios)


def largest_step_up(run: dict) -> float:
    """How much slower, as a fraction, the worst checkpoint measured than the one before
    it (0 when none was slower)."""
    measured = [c["measured_ms"] for c in run["checkpoints"]]
    return max([0.0, *(later / earlier - 1 for earlier, later in zip(measured, measured[1:]))])


def no_step_slower_by_sign_test(run: dict) -> bool | None:
    """Whether no checkpoint ran slower than the one before in significantly many of the
    paired rounds (one-sided sign test: 9 or 10 of 10 are significant); None for a run
    made before the rounds were kept."""
    counts = [c.get("rounds_slower_than_before") for c in run["checkpoints"][1:]]
    if not counts or any(count is None for count in counts):
        return None
    for count in counts:
        slower, rounds = (int(n) for n in count.split(" of "))
        p_value = sum(math.comb(rounds, k) for k in range(slower, rounds + 1)) / 2**rounds
        if p_value < SIGNIFICANT:
            return False
    return True


def met(values: list[bool | None]) -> str:
    counted = [v for v in values if v is not None]
    return f"{sum(counted)}/{len(counted)}" if counted else "-"


def summary(runs: list[dict]) -> list[dict]:
    """One row per (host, model, store kind), in the order first seen."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        key = (run["host"]["llvm_cpu"], Path(run["model"]).name, run["kind"])
        groups.setdefault(key, []).append(run)
    rows = []
    for (host, model, kind), group in groups.items():
        ratios = [ratios_at(run) for run in group]
        spread = {}
        for m in sorted({m for at in ratios for m in at}):
            values = [at[m] for at in ratios if m in at]
            spread[m] = (statistics.median(values), min(values), max(values), len(values))
        targets = COLD_AT_MOST if kind == "cold" else WARM_AT_MOST
        steps_up = [largest_step_up(run) for run in group]
        rows.append(
            {
                "host": host,
                "model": model,
                "kind": kind,
                "runs": len(group),
                "seeds": sorted(run["run"] for run in group),
                "spread": spread,
                "untuned_met": met(
                    [at.get(0.0, 0) <= UNTUNED_AT_MOST for at in ratios] if kind == "cold" else []
                ),
                "targets_met": {
                    m: met([at[m] <= limit if m in at else None for at in ratios])
                    for m, limit in targets.items()
                },
                "never_slower_met": met([r["never_slower_later"] for r in group]),
                "sign_test_met": met([no_step_slower_by_sign_test(run) for run in group]),
                "steps_up": sorted(step for step in steps_up if step > 0),
                "estimate_met": met([within_estimate(r) for r in group]),
            }
        )
    return rows


def spread_text(spread: tuple) -> str:
    median, low, high, count = spread
    return f"{median:.3f} ({low:.3f}-{high:.3f}, {count})"


def print_rows(rows: list[dict], markdown: bool) -> None:
    shown = (0.0, 2.0, 5.0, 15.0)
    header = [
        "host",
        "model",
        "store",
        "runs",
        *(f"{m:g} min: median (range, runs)" for m in shown),
        "untuned <= 2.0",
        "5 min <= 1.0 / warm 2 min <= 1.0",
        "15 min <= 0.8",
        "never slower",
        "the misses' largest step up",
        "no step slower in 9+ of 10 paired rounds",
        "within 5% of in-model estimate",
    ]
    lines = []
    for row in rows:
        targets = row["targets_met"]
        lines.append(
            [
                row["host"],
                row["model"],
                row["kind"],
                str(row["runs"]),
                *(spread_text(row["spread"][m]) if m in row["spread"] else "-" for m in shown),
                row["untuned_met"],
                targets.get(5.0, targets.get(2.0, "-")),
                targets.get(15.0, "-"),
                row["never_slower_met"],
                ", ".join(f"{step:.2%}" for step in row["steps_up"]) or "-",
                row["sign_test_met"],
                row["estimate_met"],
            ]
        )
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
        return
    for line in lines:
        print("\n".join(f"  {name}: {value}" for name, value in zip(header, line)))
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "directory", nargs="?", type=Path, default=Path("bench/results/time_to_peers")
    )
    parser.add_argument(
        "--since-seed", type=int, default=None, help="only runs of this seed or a later one"
    )
    parser.add_argument("--host", default=None, help="only runs on this LLVM cpu (znver5)")
    parser.add_argument("--markdown", action="store_true", help="one Markdown table")
    args = parser.parse_args()
    if not args.directory.is_dir():
        parser.error(f"no such directory: {args.directory}")
    runs = runs_under(args.directory)
    if args.host is not None:
        runs = [run for run in runs if run["host"]["llvm_cpu"] == args.host]
    if args.since_seed is not None:
        runs = [run for run in runs if run["run"] >= args.since_seed]
    if not runs:
        chosen = f" on {args.host}" if args.host else ""
        chosen += f" from seed {args.since_seed}" if args.since_seed is not None else ""
        parser.error(f"no runs{chosen} in the time-to-peers-*.json files under {args.directory}")
    print_rows(summary(runs), args.markdown)


if __name__ == "__main__":
    main()
