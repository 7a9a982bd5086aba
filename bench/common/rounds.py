"""Rounds of timing: every runner timed in turn, round after round, so that the host's
drift hits them alike, each round labelled by the host's state (the cache-line round trip
before it, :mod:`bench.common.host`); and what the rounds say, apart from the state."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from bench.common.host import SLOW_ABOVE_NS, round_trip_ns
from bench.common.models import unknown_models


def round_medians_ms(samples: dict, calls: int) -> dict[str, list[float]]:
    """Each runner's median ms in each round (``calls`` samples a round): how far apart
    two modules' rounds are tells what their medians' difference means."""
    return {
        label: [float(np.median(s[i : i + calls])) * 1e3 for i in range(0, len(s), calls)]
        for label, s in samples.items()
    }


def same_state_ratio(copy: dict, round_ms: list[float], round_trips: list[int]) -> float | None:
    """Measured over the in-model estimate, over only the rounds timed in the host state
    the in-model round ran in (None if the state changed during that round or no round
    shares it): what the estimate promises, apart from the host changing state."""
    trips = copy.get("in_model_round_trip_ns")
    if not trips or not copy.get("in_model_estimate_ms"):
        return None
    slow = {trip > SLOW_ABOVE_NS for trip in trips}
    if len(slow) > 1:
        return None
    state = slow.pop()
    same = [ms for ms, trip in zip(round_ms, round_trips) if (trip > SLOW_ABOVE_NS) == state]
    return statistics.median(same) / copy["in_model_estimate_ms"] if same else None


def labelled_rounds(
    runners: dict, minutes: float, calls: int, program: Path, *, alternate: bool = False
) -> list[dict]:
    """Rounds of ``calls`` timed calls of every runner for ``minutes``, each labelled by
    the cache-line round trip before it: ``{"round_trip_ns", "ms": runner -> median}``.
    ``alternate``: every other round runs the runners in reverse order."""
    from simpletvm.runtime.comparison import time_side_by_side

    rounds = []
    end = time.time() + minutes * 60
    while time.time() < end:
        trip = round_trip_ns(program)
        order = list(runners)[::-1] if alternate and len(rounds) % 2 else list(runners)
        samples = time_side_by_side(
            {label: runners[label] for label in order}, rounds=1, calls=calls, warmup=3
        )
        medians = {label: float(np.median(s)) * 1e3 for label, s in samples.items()}
        rounds.append({"round_trip_ns": trip, "ms": medians})
    return rounds


def summarize(rounds: list[dict], slow_above_ns: int) -> dict:
    """Rounds (each a ``round_trip_ns`` and each runner's median ``ms``) split by state:
    how many of each, and per runner the median of its round medians in each state."""
    slow = [r for r in rounds if r["round_trip_ns"] > slow_above_ns]
    fast = [r for r in rounds if r["round_trip_ns"] <= slow_above_ns]
    summary = {}
    for label in rounds[0]["ms"]:
        fast_ms = statistics.median(r["ms"][label] for r in fast) if fast else None
        slow_ms = statistics.median(r["ms"][label] for r in slow) if slow else None
        summary[label] = {
            "fast_ms": fast_ms,
            "slow_ms": slow_ms,
            "slow_over_fast": slow_ms / fast_ms if fast and slow else None,
        }
    return {
        "fast_rounds": len(fast),
        "slow_rounds": len(slow),
        "summary": summary,
        "rounds": rounds,
    }


def print_result(result: dict) -> None:
    """A model's rounds by state, as :func:`summarize` sums them up."""
    print(
        f"{result['model']}: {result['fast_rounds']} fast rounds, "
        f"{result['slow_rounds']} slow rounds"
    )
    if not result["fast_rounds"] or not result["slow_rounds"]:
        print("  the host stayed in one state: run longer, or again")
    for label, times in result["summary"].items():
        fast = f"{times['fast_ms']:.3f}" if times["fast_ms"] is not None else "-"
        slow = f"{times['slow_ms']:.3f}" if times["slow_ms"] is not None else "-"
        ratio = f"{times['slow_over_fast']:.2f}" if times["slow_over_fast"] else "-"
        print(f"  {label:32s} fast {fast:>8s} ms  slow {slow:>8s} ms  slow / fast {ratio}")


def save(results: dict, path: Path) -> None:
    """The results as JSON at ``path``, its directory made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))


def add_round_options(parser: argparse.ArgumentParser, models: str, minutes: float, out: str):
    """The options of a script that times built-in models in rounds labelled by state."""
    parser.add_argument("--models", default=models)
    parser.add_argument("--minutes", type=float, default=minutes, help="per model")
    parser.add_argument("--calls", type=int, default=15, help="timed calls per runner a round")
    parser.add_argument("--slow-above-ns", type=int, default=SLOW_ABOVE_NS)
    parser.add_argument("--out", type=Path, default=Path(out))


def chosen_models(parser: argparse.ArgumentParser, args) -> list[str]:
    """The built-in models ``--models`` names; an unknown one is a usage error."""
    names = args.models.split(",")
    error = unknown_models(names)
    if error:
        parser.error(error)
    return names
