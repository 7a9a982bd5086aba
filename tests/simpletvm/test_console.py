"""How every command line writes a duration and a latency (simpletvm.console)."""

from __future__ import annotations

from simpletvm.console import clock_text, latency_text, ms_text


def test_clock_text():
    assert [clock_text(s) for s in (0, 59.6, 61, 3725)] == ["0:00", "1:00", "1:01", "1:02:05"]
    assert clock_text(None) == "?"  # not known yet (an ETA)


def test_small_latencies_keep_their_digits():
    assert [ms_text(s) for s in (0, 2.18e-4, 1.234e-5, 4.1e-8, 0.1234)] == [
        "0.000",
        "0.2180",
        "0.01234",
        "0.00004100",
        "123.400",
    ]
    assert [latency_text(ms) for ms in (0.012, 0.5, 1.0, 12.3456)] == [
        "0.01200",
        "0.5000",
        "1.000",
        "12.346",
    ]
