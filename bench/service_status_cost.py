"""What status traffic costs the tuning: trials per minute of one job tuning in the
service, with and without bursts of concurrent status requests, in alternating rounds.

    python bench/service_status_cost.py                  # 2 rounds of each, 128 trials
    python bench/service_status_cost.py --rounds 3 --trials 256

Each round starts a service on a fresh store (so no round tunes warm from another's
records), submits the same tiny ONNX CNN with a trial budget and, in a loaded round,
sends a burst of ``--requests`` concurrent status requests every ``--every`` seconds
until the job ends, alternately on kept-alive connections (opened before the burst, as
the client, the CLI and the page keep theirs) and on fresh ones (each request connecting
inside its time). Trials per minute: the job's trials over the span of its tuning
stages in the trace (a trial budget, as a minutes budget ends on a whole batch of
candidates and so moves the count in steps of a batch). Each burst's p99 is reported, by kind.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common

from bench.common.service import free_port, ms, percentile, start, status_burst_as

TUNING_STAGES = ("select", "build", "profile", "update")
KINDS = ("kept", "fresh")  # the bursts' connections, alternately


def one_round(args: argparse.Namespace, loaded: bool) -> dict:
    from simpletvm.client import Client
    from simpletvm.testing import tiny_cnn_onnx

    store = Path(tempfile.mkdtemp(prefix="status-cost-"))
    model = tiny_cnn_onnx(store / "tiny.onnx", image_size=32)
    port = free_port()
    process = start(store, port, 4, "predictive")  # the service's defaults
    url = f"http://127.0.0.1:{port}"
    latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
    burst_p99: dict[str, list[float]] = {kind: [] for kind in KINDS}
    wrong = 0
    try:
        with Client(url) as client:
            job_id = client.submit(model, trials=args.trials)
            done = threading.Event()

            def wait() -> None:
                client.wait(job_id, poll_s=1.0)
                done.set()

            waiter = threading.Thread(target=wait)
            waiter.start()
            kinds = itertools.cycle(KINDS)
            while loaded and not done.wait(args.every):
                kind = next(kinds)
                burst, burst_wrong = asyncio.run(
                    status_burst_as(url, "", [job_id], args.requests, 0, kind == "fresh")
                )
                latencies[kind] += burst
                burst_p99[kind].append(percentile(burst, 0.99))
                wrong += burst_wrong
            waiter.join()
            job = client.job(job_id)
            stages = [s for s in client.trace(job_id) if s["stage"] in TUNING_STAGES]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    span = max(s["end"] for s in stages) - min(s["start"] for s in stages)
    return {
        "loaded": loaded,
        "state": job["state"],
        "trials": job["trials_done"],
        "tuning_s": round(span, 1),
        "trials_per_minute": round(job["trials_done"] / span * 60, 1),
        **{
            kind: {
                "bursts": len(burst_p99[kind]),
                "p50_ms": ms(percentile(latencies[kind], 0.5)) if latencies[kind] else None,
                "p99_ms": ms(percentile(latencies[kind], 0.99)) if latencies[kind] else None,
                # each burst's own p99: how often 200 requests at once all came back in time
                "burst_p99_ms": [ms(p) for p in burst_p99[kind]],
            }
            for kind in KINDS
        },
        "status_wrong": wrong,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each kind")
    parser.add_argument("--trials", type=int, default=128, help="each job's budget")
    parser.add_argument("--requests", type=int, default=200, help="status requests per burst")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between bursts")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = parser.parse_args()
    rounds = []
    for i in range(args.rounds):
        for loaded in (False, True) if i % 2 == 0 else (True, False):
            rounds.append(one_round(args, loaded))
            print(json.dumps(rounds[-1]), flush=True)
    quiet = [r["trials_per_minute"] for r in rounds if not r["loaded"]]
    busy = [r["trials_per_minute"] for r in rounds if r["loaded"]]
    burst_p99 = {
        kind: sorted(p for r in rounds if r["loaded"] for p in r[kind]["burst_p99_ms"])
        for kind in KINDS
    }
    result = {
        "rounds": rounds,
        "trials_per_minute_unloaded": statistics.median(quiet),
        "trials_per_minute_loaded": statistics.median(busy),
        "loaded_over_unloaded": round(statistics.median(busy) / statistics.median(quiet), 3),
        **{
            f"{kind}_connections": {
                "median_burst_p99_ms": statistics.median(p99s),
                "worst_burst_p99_ms": max(p99s),
                "bursts_p99_under_100ms": f"{sum(p < 100 for p in p99s)} of {len(p99s)}",
            }
            for kind, p99s in burst_p99.items()
        },
        "status_wrong": sum(r["status_wrong"] for r in rounds),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
