"""The tuning options as users write them: old names, and the README's table, which is
made from the options' own help."""

from __future__ import annotations

from pathlib import Path

import pytest

from simpletvm.tuning.options import TuningOptions, current_name, markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"
OLD_NAME_WARNING = "'batch_size' is the old name of the tuning option 'candidates_per_iteration'"


def test_the_readme_table_is_the_one_the_options_make():
    section = README.read_text().split("## Tuning options\n", 1)[1].split("\n## ", 1)[0]
    table = "".join(line + "\n" for line in section.splitlines() if line.startswith("|"))
    assert table == markdown_table()


def test_options_take_the_old_name_of_candidates_per_iteration():
    """``batch_size`` is the model's batch (from_model); grids and specs written before
    the candidates per iteration got their own name still say it, and are told."""
    with pytest.warns(FutureWarning, match=OLD_NAME_WARNING):
        assert TuningOptions.from_mapping({"batch_size": 4}).candidates_per_iteration == 4
    with pytest.warns(FutureWarning, match=OLD_NAME_WARNING):
        assert TuningOptions(batch_size=6).candidates_per_iteration == 6
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="at least 1"):
        TuningOptions.from_mapping({"batch_size": 0})
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="give one of them"):
        TuningOptions(batch_size=4, candidates_per_iteration=8)


def test_the_new_name_is_read_without_a_warning(recwarn):
    assert TuningOptions.from_mapping({"candidates_per_iteration": 8}).candidates_per_iteration == 8
    assert TuningOptions(candidates_per_iteration=None).candidates_per_iteration == 16
    assert current_name("trials") == "trials"
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


def test_an_old_name_warns_at_its_place():
    with pytest.warns(FutureWarning, match=f"grid.yaml:3: {OLD_NAME_WARNING}"):
        assert current_name("batch_size", "grid.yaml:3") == "candidates_per_iteration"
