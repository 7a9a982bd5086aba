"""Does ``superb compare`` tell noise from a real change? Its verdicts counted over
repeated sweeps.

Each repetition sweeps the same grid three times, each sweep a real ``python -m superb
run`` process ending with its closing round (final.csv):

- A and B, identical: every cell ``superb compare`` calls faster or slower is a false
  alarm (the goal: about none, at most the test's 5% in the long run);
- C, with one cell made slower by ``--slowdown`` (superb's test knob,
  ``SUPERB_TEST_SLOWDOWN``: a busy wait after each of that cell's calls): A against C
  should flag that cell as slower and no other.

The cells are the same model under different evaluation seeds, so every cell is one
module: any difference between them is the host's.

    python bench/superb_noise.py [--repetitions 10] [--minutes 30] [--slowdown 0.05]

Prints the counts; ``--minutes`` stops starting repetitions once that long has passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLANTED = 2  # the run index (plan order) of the cell made slower


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=10, help="A/B/C sweeps to run")
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="start no repetition after this long"
    )
    parser.add_argument("--cells", type=int, default=3, help="cells per sweep (at least 2)")
    parser.add_argument("--rounds", type=int, default=20, help="the closing round's rounds")
    parser.add_argument(
        "--slowdown", type=float, default=0.05, help="the planted regression (a fraction)"
    )
    parser.add_argument(
        "--min-effect", type=float, default=2.0, help="superb compare's --min-effect (percent)"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a built-in model name (at image_size 64, alpha 0.35) instead of the tiny ONNX CNN",
    )
    args = parser.parse_args()
    if args.cells < 2 or args.repetitions < 1:
        parser.error("--cells must be at least 2 and --repetitions at least 1")
    return args


def sweep(store: Path, name: str, model: str, args, slowdown: float | None) -> Path:
    """One superb sweep with its closing round; returns its experiment directory."""
    grid = store / f"{name}.yaml"
    seeds = ", ".join(str(i) for i in range(args.cells))
    extra = "" if args.model is None else ", image_size: 64, alpha: 0.35"
    grid.write_text(
        f"name: {name}\n"
        f"fixed: {{model: {model}, autotune: false, evaluate_repeat: 3{extra}}}\n"
        f"grid: {{evaluate_seed: [{seeds}]}}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("SUPERB_TEST_SLOWDOWN", None)
    if slowdown is not None:
        env["SUPERB_TEST_SLOWDOWN"] = f"{PLANTED}:{slowdown}"
    command = [sys.executable, "-m", "superb", "run", str(grid), "--store", str(store)]
    command += ["--plain", "--rounds", str(args.rounds)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"superb run {name} failed ({done.returncode}):\n{done.stderr}")
    return store / "superb" / name


def verdicts(a: Path, b: Path, min_effect: float) -> dict[int, str]:
    """superb compare's verdict per cell (by its run index in A), with its change and
    p-value: "slower (+5.1%, p=0.004)"."""
    from superb.final_round import read_final
    from superb.results import Experiment
    from superb.verdicts import compare_final

    final_a = read_final(Experiment(a))
    frame, _, _ = compare_final(final_a, read_final(Experiment(b)), min_effect)
    seeds = {seed: i + 1 for i, seed in enumerate(sorted(final_a["param:evaluate_seed"]))}
    return {
        seeds[row["param:evaluate_seed"]]: (
            f"{row['verdict']} ({row['change']:+.1%}, p={row['p_value']:.2g})"
        )
        for _, row in frame.iterrows()
    }


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(REPO))
    started = time.monotonic()
    counts = {"repetitions": 0, "identical_flagged": 0, "planted_found": 0, "others_flagged": 0}
    with tempfile.TemporaryDirectory(prefix="superb-noise-") as scratch:
        store = Path(scratch)
        model = args.model
        if model is None:
            from simpletvm.testing import tiny_cnn_onnx

            model = str(tiny_cnn_onnx(store / "tiny.onnx"))
        for repetition in range(args.repetitions):
            if time.monotonic() - started > args.minutes * 60:
                print(f"--minutes {args.minutes:g} passed: stopping", flush=True)
                break
            a = sweep(store, f"a{repetition}", model, args, None)
            b = sweep(store, f"b{repetition}", model, args, None)
            c = sweep(store, f"c{repetition}", model, args, args.slowdown)
            same = verdicts(a, b, args.min_effect)
            planted = verdicts(a, c, args.min_effect)
            counts["repetitions"] += 1
            counts["identical_flagged"] += sum(not v.startswith("same") for v in same.values())
            counts["planted_found"] += planted.get(PLANTED, "").startswith("slower")
            counts["others_flagged"] += sum(
                not v.startswith("same") for cell, v in planted.items() if cell != PLANTED
            )
            print(f"repetition {repetition + 1}: A/B {same}, A/C {planted}", flush=True)
    n = counts["repetitions"]
    print(
        f"{n} repetitions of {args.cells} cells, {args.rounds} rounds, min effect "
        f"{args.min_effect:g}%:\n"
        f"  identical sweeps: {counts['identical_flagged']} of {n * args.cells} cells flagged\n"
        f"  planted {args.slowdown:.0%} regression: found {counts['planted_found']} of {n}; "
        f"other cells flagged {counts['others_flagged']} of {n * (args.cells - 1)}"
    )


if __name__ == "__main__":
    main()
