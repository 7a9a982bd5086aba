"""Load on one tuning service: clients submit jobs at random times; did every job end ok,
how close is the makespan to a lower bound, do device stages ever overlap, is any user
starved, and how fast are status answers while jobs tune?

    python bench/service_load.py                     # 5 clients, 20 jobs, over 3 minutes
    python bench/service_load.py --kill-after 240    # SIGKILL the service then, restart it
    python bench/service_load.py --jobs 6 --clients 3 --spread 60   # a short run

One service on this machine, one device (``local``), tiny ONNX CNNs made here (three
input sizes, so jobs differ and later ones find records of earlier ones), short budgets.
The lower bound uses the stage durations the trace measured: no schedule can end before
the busiest resource's work after the arrivals, nor before any job's own chain of stages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common

from bench.common.service import free_port, ms, percentile, start, status_burst_as
from scheduler.trace import StageRecord, Trace


def overlaps(stages: list[dict]) -> int:
    """How many pairs of device stages overlapped on one device (the scheduler's own
    check of its trace)."""
    records = [
        StageRecord(
            job=s["job"],
            task=s["task"],
            iteration=s["iteration"],
            stage=s["stage"],
            resource=s["resource"],
            role=s["role"],
            start=s["start"],
            end=s["end"],
        )
        for s in stages
    ]
    return len(Trace(records=records).overlaps("device"))


def lower_bound(stages: list[dict], arrivals: dict[str, float]) -> float:
    """Seconds from the first arrival: the longest job chain (arrival + its own stages)
    and, per resource, max over arrival times a of a + the work there of jobs arriving
    at a or later."""
    t0 = min(arrivals.values())
    chain: dict[str, float] = defaultdict(float)
    work: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in stages:
        chain[s["job"]] += s["end"] - s["start"]
        work[s["resource"]].append((arrivals[s["job"]] - t0, s["end"] - s["start"]))
    bound = max((arrivals[j] - t0 + c for j, c in chain.items()), default=0.0)
    for items in work.values():
        for a in {a for a, _ in items}:
            bound = max(bound, a + sum(d for b, d in items if b >= a))
    return bound


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument(
        "--spread", type=float, default=180.0, help="seconds over which jobs arrive"
    )
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--policy", default="predictive")
    parser.add_argument("--kill-after", type=float, default=None)
    parser.add_argument("--status-requests", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = parser.parse_args()

    from service.db import JobTable
    from simpletvm.client import Client
    from simpletvm.testing import tiny_cnn_onnx
    from simpletvm.tuning.record_files import open_records

    rng = random.Random(args.seed)
    store = args.store or Path(tempfile.mkdtemp(prefix="service-load-"))
    store.mkdir(parents=True, exist_ok=True)
    models = [tiny_cnn_onnx(store / f"tiny{size}.onnx", image_size=size) for size in (24, 28, 32)]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(store, port, args.in_flight, args.policy)
    # the heaviest user is client 0: it sends half the jobs
    owners = [0] * (args.jobs // 2) + [
        1 + i % (args.clients - 1) for i in range(args.jobs - args.jobs // 2)
    ]
    plan = sorted((rng.uniform(0, args.spread), owner, rng.choice(models)) for owner in owners)
    tokens: dict[int, str] = {}
    table = JobTable(store / "service" / "service.sqlite")
    for user in range(args.clients):
        tokens[user] = table.add_user(f"user{user}")
    submitted: dict[str, dict] = {}
    lock = threading.Lock()
    began = time.time()

    def client_thread(user: int) -> None:
        with Client(url, tokens[user]) as client:
            for at, owner, model in plan:
                if owner != user:
                    continue
                time.sleep(max(0.0, began + at - time.time()))
                while True:
                    try:
                        job_id = client.submit(model, trials=args.trials)
                        break
                    except httpx.HTTPError:  # the service is being restarted
                        time.sleep(1.0)
                with lock:
                    submitted[job_id] = {"user": user, "arrived": time.time()}

    threads = [threading.Thread(target=client_thread, args=(u,)) for u in range(args.clients)]
    for thread in threads:
        thread.start()
    latencies: list[float] = []
    fresh: list[float] = []
    wrong = 0
    killed = False
    while True:
        time.sleep(2.0)
        if args.kill_after is not None and not killed and time.time() - began > args.kill_after:
            process.send_signal(signal.SIGKILL)
            process.wait()
            killed = True
            print(f"SIGKILLed the service at {time.time() - began:.0f} s; starting it again")
            process = start(store, port, args.in_flight, args.policy)
        with lock:
            ids = list(submitted)
        if not latencies and len(ids) >= 2:
            try:
                states = [
                    httpx.get(
                        f"{url}/api/v1/jobs/{i}",
                        headers={"Authorization": f"Bearer {tokens[submitted[i]['user']]}"},
                    ).json()["state"]
                    for i in ids
                ]
            except httpx.HTTPError:
                states = []
            if "running" in states:  # the status burst while jobs tune (one user's view)
                user = submitted[ids[0]]["user"]
                mine = [i for i in ids if submitted[i]["user"] == user]
                latencies, wrong = asyncio.run(
                    status_burst_as(url, tokens[user], mine, args.status_requests)
                )
                # the same burst, each request connecting inside its time
                fresh, fresh_wrong = asyncio.run(
                    status_burst_as(url, tokens[user], mine, args.status_requests, 0, True)
                )
                wrong += fresh_wrong
                print(
                    f"status burst of {len(latencies)} while jobs tune: p50 "
                    f"{ms(percentile(latencies, 0.5))} ms, p99 "
                    f"{ms(percentile(latencies, 0.99))} ms; on fresh connections: p50 "
                    f"{ms(percentile(fresh, 0.5))} ms, p99 {ms(percentile(fresh, 0.99))} ms; "
                    f"{wrong} wrong",
                    flush=True,
                )
        if len(ids) == args.jobs and not any(t.is_alive() for t in threads):
            rows = [table.job(i) for i in ids]
            if all(r["state"] in ("done", "failed", "cancelled") for r in rows):
                break
    rows = [table.job(i) for i in ids]
    stages = [{"job": i, **e} for i in ids for e in table.events(i, kind="stage")]
    admitted = {
        i: next((e["time"] for e in table.events(i) if e["kind"] == "admitted"), None) for i in ids
    }
    arrivals = {i: submitted[i]["arrived"] for i in ids}
    first_start = min(arrivals.values())
    makespan = max(r["finished"] for r in rows) - first_start
    bound = lower_bound(stages, arrivals)
    heavy = [i for i in ids if submitted[i]["user"] == 0]
    overtakes = max(
        (
            sum(
                1
                for h in heavy
                if arrivals[h] <= arrivals[i]
                and admitted[h]
                and admitted[i]
                and arrivals[i] < admitted[h] < admitted[i]
            )
            for i in ids
            if submitted[i]["user"] != 0
        ),
        default=0,
    )
    first_waits, admitted_ahead = {}, {}
    for user in range(args.clients):
        own = sorted((arrivals[i], i) for i in ids if submitted[i]["user"] == user)
        if own and admitted[own[0][1]]:
            arrived, first = own[0]
            first_waits[f"user{user}"] = round(admitted[first] - arrived, 1)
            # jobs given a slot while this user's first job waited for one
            admitted_ahead[f"user{user}"] = sum(
                1 for i in ids if admitted[i] and arrived < admitted[i] < admitted[first]
            )
    modules = sum(1 for i in ids if (store / "modules" / i / "model.so").exists())
    records = open_records(store)
    # a resumed job that measured a candidate again would hold more records than its budget
    over_budget = [i for i in ids if records.count(run_id=i) > args.trials]
    work: dict[str, float] = defaultdict(float)
    for s in stages:
        work[s["resource"]] += s["end"] - s["start"]
    result = {
        "policy": args.policy,
        "in_flight": args.in_flight,
        "jobs": len(ids),
        "ok": sum(r["state"] == "done" for r in rows),
        "failed": {r["id"]: r["error"] for r in rows if r["state"] != "done"},
        "killed_and_restarted": killed,
        "attempts>1": sum(r["attempts"] > 1 for r in rows),
        "modules": modules,
        "runs_over_budget": over_budget,
        "makespan_s": round(makespan, 1),
        "lower_bound_s": round(bound, 1),
        "ratio": round(makespan / bound, 3) if bound else None,
        "busy_fraction": {r: round(w / makespan, 3) for r, w in sorted(work.items())},
        "device_overlaps": overlaps(stages),
        "max_heavy_user_jobs_admitted_ahead_of_a_waiting_other_users_job": overtakes,
        "first_job_queue_wait_s": first_waits,
        "jobs_admitted_while_a_users_first_job_waited": admitted_ahead,
        "status_requests": len(latencies),
        "status_wrong": wrong,
        "status_p50_ms": ms(percentile(latencies, 0.5)) if latencies else None,
        "status_p99_ms": ms(percentile(latencies, 0.99)) if latencies else None,
        "fresh_connection_status_p50_ms": ms(percentile(fresh, 0.5)) if fresh else None,
        "fresh_connection_status_p99_ms": ms(percentile(fresh, 0.99)) if fresh else None,
        "store": str(store),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    process.send_signal(signal.SIGTERM)
    process.wait(60)


if __name__ == "__main__":
    main()
