"""superb compare's verdict on seeded synthetic closing rounds with a known answer: each
round's median one sample, a Mann-Whitney U test on them and a smallest effect together
(:func:`superb.statistics.decide`), and what it says with too few rounds."""

from __future__ import annotations

import numpy as np
from scipy.stats import mannwhitneyu
from test_superb_final_round import write_final

from superb.final_round import read_final
from superb.statistics import ALPHA, decide, halves
from superb.verdicts import self_band


def rounds(rng, shift: float = 1.0, bias: float = 0.01, calls: int = 50, count: int = 6):
    """``count`` rounds of ``calls`` calls around 10 ms times ``shift``: each round off
    by its own bias (lognormal, ``bias``), as a load's placement and the host's moment
    make it, each call by a little noise around it."""
    return [
        list(10.0 * shift * np.exp(rng.normal(0.0, bias)) * rng.lognormal(0.0, 0.005, calls))
        for _ in range(count)
    ]


def test_rounds_shifted_by_five_percent_are_slower_and_faster_the_other_way():
    for seed in range(20):
        rng = np.random.default_rng(seed)
        base = rounds(rng)
        assert decide(base, rounds(rng, 1.05)).verdict == "slower"
        assert decide(base, rounds(rng, 0.95)).verdict == "faster"


def test_one_disturbed_round_does_not_hide_a_five_percent_change():
    """A round the host disturbed (15% slow) on the faster side: a test on means would
    count its spread as noise; the rank test still sees every other round apart."""
    for seed in range(20):
        rng = np.random.default_rng(seed)
        base, moved = rounds(rng, count=12), rounds(rng, 1.05, count=12)
        base[3] = [c * 1.15 for c in base[3]]
        assert decide(base, moved).verdict == "slower", seed


def test_a_real_change_below_the_smallest_effect_is_same():
    rng = np.random.default_rng(0)
    base, moved = rounds(rng, bias=0.001), rounds(rng, 1.01, bias=0.001)
    one_percent = decide(base, moved, min_effect_pct=2.0)
    assert one_percent.p_value < ALPHA and one_percent.verdict == "same"
    assert decide(base, moved, min_effect_pct=0.5).verdict == "slower"


def test_identical_distributions_raise_false_alarms_at_most_as_often_as_alpha():
    alarms = [
        decide(rounds(rng), rounds(rng), min_effect_pct=0.0).verdict != "same"
        for rng in (np.random.default_rng(seed) for seed in range(400))
    ]
    assert np.mean(alarms) <= ALPHA + 0.02


def test_many_calls_a_round_with_a_bias_per_round_but_no_shift_are_same():
    """Thousands of calls make a test on calls find every round's bias "significant";
    the rounds, the independent samples, do not."""
    calls_flagged = rounds_flagged = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        a, b = rounds(rng, bias=0.03, calls=1000), rounds(rng, bias=0.03, calls=1000)
        calls_a, calls_b = np.concatenate(a), np.concatenate(b)
        change = np.median(calls_b) / np.median(calls_a) - 1.0
        p_calls = mannwhitneyu(calls_a, calls_b, alternative="two-sided").pvalue
        calls_flagged += p_calls < ALPHA and abs(change) >= 0.02
        rounds_flagged += decide(a, b).verdict != "same"
    assert rounds_flagged <= 2 < 5 <= calls_flagged


def test_fewer_than_two_rounds_a_side_is_a_question_mark_with_its_reason():
    rng = np.random.default_rng(0)
    two, one = rounds(rng, count=2), rounds(rng, count=1)
    verdict = decide(two, one)
    assert verdict.verdict == "?" and "fewer than 2 timed rounds a side (2 and 1)" in verdict.reason
    assert verdict.change == verdict.change and verdict.p_value != verdict.p_value
    empty = decide([], two)
    assert empty.verdict == "?" and empty.change != empty.change
    assert [len(half) for half in halves(rounds(rng))] == [3, 3]


def test_a_cell_that_is_its_own_yardstick_is_same():
    flat = [[2.0, 2.0]] * 3
    assert decide(flat, flat).verdict == "same"


def test_two_rounds_make_a_self_band_of_question_marks_that_say_why(cli, tmp_path):
    experiment = write_final(tmp_path / "a", count=2)
    frame, _ = self_band(read_final(experiment))
    assert set(frame["verdict"]) == {"?"}
    result = cli("compare", experiment.dir)
    assert result.exit_code == 0, result.output
    assert "fewer than 2 timed rounds a side (1 and 1)" in result.stdout
    assert "? alpha=0.35" in result.stdout


def test_the_self_band_holds_each_order_equally_in_both_halves():
    """A cell timed 3% slower whenever it goes first (the plan's order, even rounds) and
    no slower otherwise: each half holds as many even rounds as odd, so no change shows."""
    count = 20
    first, second = halves(list(range(count)))
    assert sorted(first + second) == list(range(count))
    for half in (first, second):
        assert sum(r % 2 == 0 for r in half) == sum(r % 2 == 1 for r in half) == count // 4
    for seed in range(20):
        rng = np.random.default_rng(seed)
        placed = [
            [c * (1.03 if number % 2 == 0 else 1.0) for c in calls]
            for number, calls in enumerate(rounds(rng, count=count))
        ]
        assert decide(*halves(placed)).verdict == "same", seed
