"""The README's first command, `simpletvm quickstart`, end to end on a small input."""

from __future__ import annotations

import itertools
import json
import re
import time

import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

from simpletvm.cli import app
from simpletvm.runtime.comparison import time_side_by_side
from simpletvm.runtime.evaluation import RETURN_WARMUP_S


def test_runners_take_turns_and_each_turn_opens_with_untimed_calls():
    calls: list[str] = []
    runners = {name: (lambda name=name: calls.append(name) or np.zeros(1)) for name in "ab"}
    samples = time_side_by_side(runners, rounds=3, calls=2, warmup=1, warmup_s=0)
    assert {name: len(s) for name, s in samples.items()} == {"a": 6, "b": 6}
    assert calls == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    assert all(s >= 0 for s in samples["a"] + samples["b"])


def test_a_runners_first_turn_warms_up_for_its_warmup_time_and_later_ones_briefly():
    """The first turn follows an idle machine (a build, an import): it warms up for at
    least ``warmup_s``; later turns follow another runner's at once, and warm up for
    their calls and the short floor only."""
    calls: list[tuple[str, float]] = []

    def runner(name):
        return lambda: calls.append((name, time.perf_counter())) or np.zeros(1)

    time_side_by_side(
        {"a": runner("a"), "b": runner("b")}, rounds=3, calls=1, warmup=1, warmup_s=0.2
    )
    turns = [[t for _, t in group] for _, group in itertools.groupby(calls, key=lambda c: c[0])]
    assert len(turns) == 6 and all(len(turn) >= 2 for turn in turns)  # warm-up, then the timed call
    spans = [turn[-1] - turn[0] for turn in turns]
    assert min(spans[:2]) >= 0.199, spans  # each runner's first turn: the whole warm-up time
    assert all(RETURN_WARMUP_S - 0.001 <= span < 0.1 for span in spans[2:]), spans


def test_simpletvm_runners_resize_the_pool_only_when_the_count_changes(monkeypatch):
    """One runner per thread count; each resizes the shared pool when the other left it
    at another count, so a turn of many calls pays for one resize; the pool gets its
    count back after."""
    import simpletvm.runtime.comparison as comparison
    import simpletvm.runtime.threads as threads

    resized: list[int] = []
    monkeypatch.setattr(comparison, "simpletvm_runner", lambda stvm, example: lambda: example)
    monkeypatch.setattr(threads, "set_runtime_threads", resized.append)
    monkeypatch.setattr(threads, "runtime_threads", lambda: 7)
    with comparison.simpletvm_runners(None, np.ones(1), [1, 2, 2]) as runners:
        assert list(runners) == [2, 1]
        for count in (2, 2, 1, 1, 2):
            assert runners[count]() == 1
        assert resized == [2, 1, 2]
    assert resized == [2, 1, 2, 7]  # the pool set back to the count it had


@pytest.mark.slow
def test_quickstart_tunes_saves_and_compares_with_tflite(tmp_path, check_verdict):
    result = CliRunner().invoke(
        app, ["quickstart", "--image-size", "32", "--minutes", "0.1", "--store", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    # the tuning shows as progress lines, not a log line per task (those are in the log)
    assert not re.search(r"task \d+/\d+ \S+ tuned", result.output), result.output
    assert re.search(
        r"^tuning mobilenetv2: \d+ trials, estimate [\d.]+ ms", result.output, re.MULTILINE
    ), result.output
    output = " ".join(result.output.split())
    untuned, tuned = (
        float(re.search(rf"\b{build} \W ([\d.]+) \W [\d.]+ \W [\d.]+ \W", output).group(1))
        for build in ("untuned", "tuned")
    )
    # each build's answers against the Keras model it came from, beside its latencies
    assert "rel. error vs keras" in output
    for build in ("untuned", "tuned"):
        error = re.search(rf"\b{build} \W [\d.]+ \W [\d.]+ \W [\d.]+ \W (\S+) \W", output)
        assert error and float(error.group(1)) < 1e-5, output
    # so small a model and so short a budget tune a first round only, whose best may lose
    # to TVM's default schedule on a loaded machine: faster or slower, the verdict must
    # say what the medians printed beside it say
    check_verdict(output, untuned, tuned)
    assert re.search(r"untuned \(median\) after \d+ trials over \d+ tasks", output)
    match = re.search(
        r"from Python\): SimpleTVM (.*?); SimpleTVM untuned (.*?); TFLite \(XNNPACK\) (.*?)\. "
        r"Each on its faster count: SimpleTVM / TFLite ([\d.]+)x, SimpleTVM is "
        r"(faster|slower|as fast); SimpleTVM untuned / TFLite ([\d.]+)x, SimpleTVM untuned "
        r"is (faster|slower|as fast)",
        output,
    )
    assert match, output
    ours, untuned_ours, tflite = (
        {
            int(count): float(ms)
            for ms, count in re.findall(r"([\d.]+) ms on (\d+) threads?", match.group(side))
        }
        for side in (1, 2, 3)
    )
    cores = psutil.cpu_count(logical=False)  # the target's cores, as SimpleTVM counts them
    # each side on every core and on one: the faster of each counts
    assert set(ours) == set(untuned_ours) == set(tflite) == {cores, 1}
    for side, ratio_group in ((ours, 4), (untuned_ours, 6)):
        printed_ratio, word = float(match.group(ratio_group)), match.group(ratio_group + 1)
        assert word == (
            "as fast" if printed_ratio == 1 else "faster" if printed_ratio < 1 else "slower"
        )
        assert printed_ratio == pytest.approx(
            min(side.values()) / min(tflite.values()), rel=0.02, abs=0.01
        )
    # tuned against untuned as timed in the same rounds, each on its faster count
    same_rounds = re.search(r"SimpleTVM / SimpleTVM untuned ([\d.]+)x in the same rounds", output)
    assert same_rounds, output
    assert float(same_rounds.group(1)) == pytest.approx(
        min(ours.values()) / min(untuned_ours.values()), rel=0.02, abs=0.01
    )
    assert re.search(r"tasks in \d+:\d\d; estimate [\d.]+ ms", output)
    run_id = re.search(r"run id (\w{32})", output).group(1)
    context = json.loads((tmp_path / "runs" / run_id / "context.json").read_text())
    assert context["model"]["route"] == "tflite" and context["model"]["layout"] == "NHWC"
    assert context["tuning"]["runner"] == "local"
    # the budget ran out in the first round, yet every task was measured
    assert all(task["trials"] >= 1 for task in context["tuning"]["tasks"])
    assert context["evaluation"]["tuned"] is True
    # the tuned build timed itself on each thread count and kept the faster
    chosen = context["steps"][-3]["runtime_threads"]
    assert context["steps"][-3]["step"] == "build" and set(chosen["median_ms"]) == {str(cores), "1"}
    assert chosen["median_ms"][str(chosen["threads"])] == min(chosen["median_ms"].values())
    # ... and chose again before the evaluation timed it
    evaluate = context["steps"][-1]
    assert evaluate["step"] == "evaluate" and set(evaluate["runtime_threads"]["median_ms"]) == {
        str(cores),
        "1",
    }
    assert context["evaluation"]["threads"] == evaluate["runtime_threads"]["threads"]
    assert context["steps"][-3]["fork_join_pool"] == "simpletvm"
