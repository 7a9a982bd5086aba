"""The benchmark scripts stay runnable and their results stay findable: each kept script
answers ``--help`` (parsed before TVM or TensorFlow is imported, so it costs seconds), and
every path under ``bench/`` that the documents cite exists. Nothing is timed here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SCRIPTS = sorted(
    path
    for folder in (BENCH, BENCH / "diagnostics")
    for path in folder.glob("*.py")
    if path.name != "__init__.py"
)
DOCUMENTS = [ROOT / "BENCHMARKS.md", ROOT / "README.md", BENCH / "README.md"]
DOCUMENTS += sorted((ROOT / "docs").rglob("*.md"))
DOCUMENTS += sorted(  # the code's comments and docstrings cite bench scripts too
    path
    for package in ("simpletvm", "scheduler", "superb", "service")
    for path in (ROOT / package).rglob("*.py")
)
CITED = re.compile(r"bench/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*/]")  # a * stands for any name


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: str(path.relative_to(BENCH)))
def test_help_runs(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: "), done.stdout


def cited_paths() -> list[tuple[str, str]]:
    """(document, path) for every ``bench/...`` path a document names."""
    return [
        (str(document.relative_to(ROOT)), match.group(0))
        for document in DOCUMENTS
        if document.exists()
        for match in CITED.finditer(document.read_text())
    ]


def test_documents_cite_bench_paths() -> None:
    assert any(path.startswith("bench/results/") for _, path in cited_paths())


@pytest.mark.parametrize(("document", "path"), cited_paths())
def test_cited_path_exists(document: str, path: str) -> None:
    found = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
    assert found, f"{document} cites {path}, which does not exist"


def test_scripts_import_common_not_each_other() -> None:
    """A script imports what it shares from ``bench.common``, never another script."""
    names = {path.stem for path in SCRIPTS}
    for path in [*SCRIPTS, *sorted((BENCH / "common").glob("*.py"))]:
        imported = re.findall(r"^\s*(?:from|import) ([A-Za-z_][\w.]*)", path.read_text(), re.M)
        assert not names & set(imported), f"{path.relative_to(ROOT)} imports a script"
