"""superb compare's yardstick on synthetic closing rounds (no SimpleTVM runs): the host's
drift between experiments cancelled, one cell's change still found, a change slowing
every SimpleTVM cell alike found with the peers, and the choice shown and refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_superb_results import fake_row, write_experiment

from superb.final_round import FINAL_CSV, ROUNDS, Cell, final_frame, read_final
from superb.verdicts import compare_final, self_band

CALLS = 20
SIMPLETVM = [
    Cell(f"simpletvm:{i}", "simpletvm", {"param:alpha": a}, index=i)
    for i, a in enumerate([0.25, 0.5, 0.75], 1)
]
PEER = Cell("peer:onnxruntime:m", "peer", {"param:alpha": None}, peer="onnxruntime")
SPEEDS = {1: 1.0, 2: 1.3, 3: 1.6, None: 2.0}  # each cell's ms; None: the peer's


def timed_rounds(cells: list[Cell], seed: int = 0) -> list[dict]:
    """ROUNDS rounds (the closing round's default) of 20 calls per cell, the host's speed wandering from round to round."""
    rng = np.random.default_rng(seed)
    host = 1.0 + 0.05 * np.sin(np.arange(ROUNDS) * 1.7)
    return [
        {
            "round": r,
            "samples_ms": {
                c.name: list(rng.lognormal(0, 0.03, CALLS) * SPEEDS[c.index] * host[r])
                for c in cells
            },
            "outcomes": {c.name: {"status": "ok"} for c in cells},
            "load_before": 0.5,
            "load_after": 0.5,
        }
        for r in range(ROUNDS)
    ]


def slowed(done: list[dict], host: float = 1.0, cells: dict[str, float] | None = None):
    """``done`` with every call times ``host``, and the named cells' times their factor."""
    cells = cells or {}
    return [
        event
        | {
            "samples_ms": {
                name: [c * host * cells.get(name, 1.0) for c in calls]
                for name, calls in event["samples_ms"].items()
            }
        }
        for event in done
    ]


def final_of(cells: list[Cell], done: list[dict]):
    """final.csv's frame as :func:`superb.final_round.read_final` gives it."""
    frame = final_frame(cells, done, 0)
    frame["rounds_ms"] = [json.loads(text) for text in frame["samples_ms"]]
    return frame


def verdicts(frame) -> dict[float, str]:
    return dict(zip(frame["param:alpha"], frame["verdict"], strict=True))


WITH_PEER = [*SIMPLETVM, PEER]


def test_the_host_drift_between_experiments_is_cancelled_by_the_yardstick():
    a = timed_rounds(WITH_PEER)
    b = slowed(a, host=1.10)
    frame, _, scale = compare_final(final_of(WITH_PEER, a), final_of(WITH_PEER, b))
    assert scale.kind == "peers" and scale.drift == pytest.approx(0.10)
    assert set(frame["verdict"]) == {"same"}
    raw, _, scale = compare_final(final_of(WITH_PEER, a), final_of(WITH_PEER, b), yardstick="none")
    assert scale.kind == "none" and set(raw["verdict"]) == {"slower"}


@pytest.mark.parametrize("cells", [WITH_PEER, SIMPLETVM], ids=["peers", "cells"])
@pytest.mark.parametrize("host", [1.0, 1.10])
def test_one_cell_slower_is_the_only_one_found(cells, host):
    """Without peers the median of the cells is the yardstick; the slowed cell is one the
    median is not, so the other cells stay where they were."""
    a = timed_rounds(cells, seed=1)
    b = slowed(a, host, {SIMPLETVM[0].name: 1.05})
    frame, _, scale = compare_final(final_of(cells, a), final_of(cells, b))
    assert scale.kind == ("peers" if PEER in cells else "cells")
    found = verdicts(frame)
    assert found.pop(0.25) == "slower"
    assert set(found.values()) == {"same"}


def test_every_simpletvm_cell_slower_alike_shows_against_the_peers():
    a = timed_rounds(WITH_PEER, seed=2)
    b = slowed(a, 1.10, {c.name: 1.05 for c in SIMPLETVM})
    frame, _, _ = compare_final(final_of(WITH_PEER, a), final_of(WITH_PEER, b))
    assert list(frame.loc[frame["kind"] == "simpletvm", "verdict"]) == ["slower"] * 3
    assert list(frame.loc[frame["kind"] == "peer", "verdict"]) == ["same"]


def test_the_noise_band_cancels_the_drift_between_its_halves():
    done = [
        slowed([event], 1.10 if event["round"] % 4 in (1, 2) else 1.0)[0]
        for event in timed_rounds(WITH_PEER, seed=3)
    ]
    band, scale = self_band(final_of(WITH_PEER, done))
    assert scale.kind == "peers" and set(band["verdict"]) == {"same"}
    raw, _ = self_band(final_of(WITH_PEER, done), yardstick="none")
    assert set(raw["verdict"]) == {"slower"}  # the second half, B, ran slower


def write_final(directory, done: list[dict], cells: list[Cell]):
    rows = [fake_row(c.index, {"alpha": c.params["param:alpha"]}, 1.0) for c in SIMPLETVM]
    experiment = write_experiment(directory, rows)
    final_frame(cells, done, 0).to_csv(experiment.dir / FINAL_CSV, index=False)
    assert len(read_final(experiment)) == len(cells)
    return experiment.dir


def test_compare_says_which_yardstick_it_used_and_refuses_peers_without_any(cli, tmp_path):
    a = timed_rounds(WITH_PEER)
    first = write_final(tmp_path / "a", a, WITH_PEER)
    second = write_final(tmp_path / "b", slowed(a, 1.10), WITH_PEER)
    result = cli("compare", first, second)
    assert result.exit_code == 0, result.output
    assert "yardstick: peers" in result.stdout and "host drift +10.0%" in result.stdout
    assert "4 same" in result.stdout
    raw = cli("compare", first, second, "--yardstick", "none")
    assert "yardstick: none" in raw.stdout and "4 slower" in raw.stdout
    alone = write_final(tmp_path / "c", timed_rounds(SIMPLETVM), SIMPLETVM)
    assert "yardstick: cells" in cli("compare", alone).stdout
    refused = cli("compare", alone, alone, "--yardstick", "peers")
    assert refused.exit_code == 2 and "no peer was timed" in refused.stderr
    assert cli("compare", first, second, "--yardstick", "nope").exit_code == 2
    assert "--yardstick" in cli("compare", "--help").stdout
