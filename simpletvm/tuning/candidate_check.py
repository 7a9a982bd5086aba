"""A round's fastest candidates checked against TVM's naive schedule before one becomes
its task's best (:mod:`simpletvm.compiler.schedule_check`): the search measures for
speed only, and a wrong kernel can be the fastest. A wrong one is given to the search,
the cost model and the records as a failed measurement, so it is never a record and
never taught as a fast schedule."""

from __future__ import annotations

from typing import Any

from simpletvm.compiler.schedule_check import check_kernels

WRONG = "wrong answer: the schedule {}"


def refuse_wrong_fastest(
    task_mod, candidates: list, results: list, best_s: float | None, tvm_target
) -> tuple[list, list[str]]:
    """``results`` with each candidate that would be the task's new best (faster than
    ``best_s``, fastest first) checked until one is right, the wrong ones turned into
    failures. Returns ``(results, the failures' messages)``."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    results = list(results)
    timed = sorted(
        (latency, index)
        for index, latency in enumerate(mean_seconds(r.run_secs) for r in results)
        if latency is not None and (best_s is None or latency < best_s)
    )
    wrong = []
    for _, index in timed:
        pair = (task_mod["main"], candidates[index].sch.mod["main"])
        verdict = check_kernels({"candidate": pair}, tvm_target)["candidate"]
        if verdict.ok:
            break
        results[index] = RunnerResult(None, WRONG.format(verdict.describe()))
        wrong.append(results[index].error_msg)
    return results, wrong


def mean_seconds(run_secs: Any) -> float | None:
    """A measurement's mean seconds (None: it failed)."""
    values = [float(v) for v in run_secs or []]
    return sum(values) / len(values) if values else None
