"""The host's float32 FMA peak: GFLOP/s of its cores doing nothing but vector FMAs.

    python bench/diagnostics/fma_peak.py [--threads 1,2]

No kernel beats it; ``bench/peers.py`` and ``bench/diagnostics/roofline.py`` measure it in
their own runs and set each framework's GFLOP/s against it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads",
        default=",".join(str(n) for n in sorted({1, os.cpu_count() or 1})),
        help="thread counts, comma-separated",
    )
    args = parser.parse_args()

    from bench.common.host import fma_peak, fma_peak_program

    with tempfile.TemporaryDirectory(prefix="fma-peak-") as scratch:
        program = fma_peak_program(Path(scratch))
        for threads in (int(n) for n in args.threads.split(",")):
            peak = fma_peak(program, threads)
            print(f"{threads} thread(s): {peak['gflops']:.1f} GFLOP/s ({peak['lanes']} lanes)")


if __name__ == "__main__":
    main()
