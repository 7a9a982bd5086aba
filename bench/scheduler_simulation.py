"""Simulated makespans of the scheduling policies with the thesis' stage times.

Run: python bench/scheduler_simulation.py [--iterations 10] [--markdown]

Every job is one task of ``--iterations`` tuning iterations. The thesis measures
8.3 s build, 39.5 s profile and 44.0 s "updating the model and selecting the next
batch" (section 3.4.1); the last is split here into two client stages, select 22 s
at the start of an iteration and update 22 s at its end, so an iteration is
select -> build -> profile -> update. Only the order of client work matters for the
makespan, and between two profiles of one job the client always runs
update + select + build = 52.3 s whichever way the 44 s is split.

The lower bound is the largest of: the client's total work divided by its capacity,
the device work divided by the number of devices, and one job's own chain of stages.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler import Policy, Stage, State, client, devices, get_policy
from scheduler.policies import Start
from scheduler.simulate import simulate
from scheduler.testing import MockJob

THESIS = {"select": 22.0, "build": 8.3, "profile": 39.5, "update": 22.0}
THESIS_IDLE = {"client": 0.45, "device": 0.55}
JOB_COUNTS = (1, 2, 4, 8, 16, 64)
DEVICE_COUNTS = (1, 2, 3, 4)
POLICIES = ("sequential", "round-robin", "predictive", "synchronous")


def thesis_jobs(count: int, iterations: int) -> list[MockJob]:
    return [
        MockJob(
            f"job{i}", iterations=iterations, durations=THESIS, resources={"profile": "device:gpu"}
        )
        for i in range(count)
    ]


def lower_bound(count: int, iterations: int, device_count: int) -> float:
    device = THESIS["profile"] * iterations
    client_work = (sum(THESIS.values()) - THESIS["profile"]) * iterations
    return max(count * client_work, count * device / device_count, client_work + device)


def makespan_table(iterations: int) -> list[dict[str, float]]:
    rows = []
    for count in JOB_COUNTS:
        for device_count in DEVICE_COUNTS:
            resources = [client(), *devices("gpu", device_count)]
            row: dict[str, float] = {"jobs": count, "devices": device_count}
            row["bound"] = lower_bound(count, iterations, device_count)
            for name in POLICIES:
                trace = simulate(thesis_jobs(count, iterations), resources, name)
                assert not trace.failed, trace.failed
                row[name] = trace.makespan
                row[f"{name} overlaps"] = len(trace.overlaps())
            rows.append(row)
    return rows


HEAVY_DEVICE = {"select": 1.0, "build": 1.0, "profile": 30.0, "update": 1.0}
HEAVY_CLIENT = {"select": 20.0, "build": 10.0, "profile": 1.0, "update": 20.0}


def mixed_jobs(client_heavy: int, device_heavy: int, iterations: int) -> list[MockJob]:
    return [
        MockJob(f"c{i}", iterations=iterations, durations=HEAVY_CLIENT) for i in range(client_heavy)
    ] + [
        MockJob(f"d{i}", iterations=iterations, durations=HEAVY_DEVICE) for i in range(device_heavy)
    ]


def random_jobs(seed: int) -> tuple[list[MockJob], int, int]:
    rng = random.Random(seed)
    jobs = [
        MockJob(
            f"j{i}",
            iterations=rng.randint(1, 6),
            durations={kind: rng.uniform(1, 40) for kind in THESIS},
        )
        for i in range(rng.randint(2, 8))
    ]
    return jobs, rng.randint(1, 3), rng.randint(1, 2)


def heterogeneous_table(iterations: int) -> list[tuple[str, float, float, float]]:
    """(set, round-robin, predictive, bound) makespans in seconds."""
    rows = []
    for client_heavy, device_heavy, device_count in ((1, 3, 1), (2, 4, 2), (3, 6, 2)):
        resources = [client(), *devices("default", device_count)]
        makespans = [
            simulate(mixed_jobs(client_heavy, device_heavy, iterations), resources, p).makespan
            for p in ("round-robin", "predictive")
        ]
        client_work = iterations * (client_heavy * 50.0 + device_heavy * 3.0)
        device_work = iterations * (client_heavy * 1.0 + device_heavy * 30.0) / device_count
        label = (
            f"{client_heavy} client-heavy + {device_heavy} device-heavy, {device_count} device(s)"
        )
        rows.append((label, *makespans, max(client_work, device_work, iterations * 51.0)))
    totals = {"round-robin": 0.0, "predictive": 0.0}
    wins = losses = 0
    for seed in range(100):
        spans = {}
        for policy in totals:
            jobs, device_count, capacity = random_jobs(seed)
            spans[policy] = simulate(
                jobs, [client(capacity=capacity), *devices("default", device_count)], policy
            ).makespan
            totals[policy] += spans[policy]
        wins += spans["predictive"] < spans["round-robin"] - 1e-6
        losses += spans["predictive"] > spans["round-robin"] + 1e-6
    rows.append(
        (
            f"100 random sets (sum; predictive faster in {wins}, slower in {losses})",
            totals["round-robin"],
            totals["predictive"],
            float("nan"),
        )
    )
    return rows


def idle_fractions() -> dict[str, float]:
    trace = simulate(thesis_jobs(1, 1), [client(), *devices("gpu", 1)], "sequential")
    utilization = trace.utilization()
    return {"client": 1 - utilization["client"], "device": 1 - utilization["gpu0"]}


class TimedPolicy(Policy):
    """Wraps a policy and sums the time spent in its decisions."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.exclusive = inner.exclusive  # type: ignore[misc]
        self.seconds = 0.0
        self.calls = 0
        self.starts = 0

    def decide(self, state: State) -> list[Start]:
        began = time.perf_counter()
        starts = self.inner.decide(state)
        self.seconds += time.perf_counter() - began
        self.calls += 1
        self.starts += len(starts)
        return starts

    def stage_finished(
        self, job_id: str, stage: Stage, next_stage: Stage | None, duration: float
    ) -> None:
        began = time.perf_counter()
        self.inner.stage_finished(job_id, stage, next_stage, duration)
        self.seconds += time.perf_counter() - began


def overhead(
    job_count: int = 1000, iterations: int = 2, device_count: int = 4
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for load, durations in (
        ("thesis means, client-bound", THESIS),
        ("device-heavy, device-bound", HEAVY_DEVICE),
    ):
        for name in ("round-robin", "sequential", "predictive"):
            policy = TimedPolicy(get_policy(name))
            jobs = [
                MockJob(f"job{i}", iterations=iterations, durations=durations)
                for i in range(job_count)
            ]
            began = time.perf_counter()
            trace = simulate(jobs, [client(), *devices("default", device_count)], policy)
            wall = time.perf_counter() - began
            rows.append(
                {
                    "load": load,
                    "policy": name,
                    "stages": len(trace.records),
                    "decisions": policy.calls,
                    "policy_us_per_decision": 1e6 * policy.seconds / policy.calls,
                    "loop_us_per_stage": 1e6 * wall / len(trace.records),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10, help="tuning iterations per job")
    args = parser.parse_args()

    began = time.perf_counter()
    print(
        f"# scheduler simulation: {args.iterations} iterations/job, stage means {THESIS}, one client "
        f"(capacity 1); python {platform.python_version()} on {platform.machine()}\n"
    )
    print(
        "## Makespan (hours) by policy; ratio = makespan / lower bound; speedup = sequential / makespan\n"
    )
    print(
        "| jobs | devices | bound | sequential | round-robin | predictive | synchronous | rr ratio "
        "| pred ratio | rr speedup | pred speedup | sync overlaps |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in makespan_table(args.iterations):
        hours = {k: row[k] / 3600 for k in ("bound", *POLICIES)}
        print(
            f"| {row['jobs']:.0f} | {row['devices']:.0f} | {hours['bound']:.3f} | {hours['sequential']:.3f} "
            f"| {hours['round-robin']:.3f} | {hours['predictive']:.3f} | {hours['synchronous']:.3f} "
            f"| {row['round-robin'] / row['bound']:.3f} | {row['predictive'] / row['bound']:.3f} "
            f"| {row['sequential'] / row['round-robin']:.2f} | {row['sequential'] / row['predictive']:.2f} "
            f"| {row['synchronous overlaps']:.0f} |"
        )
        assert (
            row["round-robin overlaps"]
            == row["predictive overlaps"]
            == row["sequential overlaps"]
            == 0
        )

    print("\n## Heterogeneous jobs, 1 client: makespan (s), round-robin against predictive\n")
    print(
        "Client-heavy: select 20, build 10, profile 1, update 20 s. Device-heavy: 1, 1, 30, 1 s. "
        "Random sets: 2-8 jobs, 1-6 iterations, every stage uniform in 1-40 s, 1-3 devices, "
        "client capacity 1-2 (seeds 0-99).\n"
    )
    print("| jobs | round-robin | predictive | predictive / round-robin | bound |")
    print("|---|---:|---:|---:|---:|")
    for label, round_robin, predictive, bound in heterogeneous_table(args.iterations):
        shown = "" if bound != bound else f"{bound:.0f}"
        print(
            f"| {label} | {round_robin:.0f} | {predictive:.0f} | {predictive / round_robin:.3f} | {shown} |"
        )

    idle = idle_fractions()
    print("\n## Single job, sequential: idle fraction of each resource\n")
    print("| resource | simulated from the stage means | thesis, measured (3.4.1) |")
    print("|---|---:|---:|")
    for resource in ("client", "device"):
        print(f"| {resource} | {idle[resource]:.1%} | {THESIS_IDLE[resource]:.0%} |")

    print("\n## Scheduling overhead, 1000 jobs x 2 iterations, 1 client + 4 devices (simulated)\n")
    print(
        "Policy time is spent in decide() and stage_finished(); the whole loop adds the state "
        "updates, the trace and the simulated backend.\n"
    )
    print("| jobs | policy | stages | decisions | policy us/decision | whole loop us/stage |")
    print("|---|---|---:|---:|---:|---:|")
    for row in overhead():
        print(
            f"| {row['load']} | {row['policy']} | {row['stages']} | {row['decisions']} "
            f"| {row['policy_us_per_decision']:.1f} | {row['loop_us_per_stage']:.1f} |"
        )
    print(f"\n(total {time.perf_counter() - began:.1f} s)")


if __name__ == "__main__":
    main()
