"""The run store: layout, atomic writes, and shared JSON-lines files under concurrency."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from simpletvm.store import RunStore, append_lines, atomic_write_json, read_json_lines
from simpletvm.tuning.records import target_key


def test_root_from_argument_environment_and_default(tmp_path, monkeypatch):
    monkeypatch.delenv("SIMPLETVM_HOME", raising=False)
    assert RunStore().root == Path("~/tvm-benchmark").expanduser()
    monkeypatch.setenv("SIMPLETVM_HOME", str(tmp_path / "env"))
    assert RunStore().root == tmp_path / "env"
    assert RunStore(tmp_path / "arg").root == tmp_path / "arg"
    store = RunStore(tmp_path)
    assert store.context_path("abc") == tmp_path / "runs" / "abc" / "context.json"
    assert store.module_dir("abc") == tmp_path / "modules" / "abc"
    assert store.records_path == tmp_path / "records.sqlite"
    assert store.superb_dir == tmp_path / "superb"


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "a" / "data.json"
    atomic_write_json(path, {"x": 1})
    atomic_write_json(path, {"x": 2})
    assert json.loads(path.read_text()) == {"x": 2}
    assert [p.name for p in path.parent.iterdir()] == ["data.json"]


def _append_many(path: str, writer: int, count: int) -> None:
    for index in range(count):
        # large lines make interleaving likely if appends were not locked
        append_lines(
            Path(path), [json.dumps({"writer": writer, "index": index, "pad": "x" * 5000})]
        )


def _in_parallel(target, argument_lists) -> None:
    """Run ``target`` in one real process per argument list, all at once."""
    processes = [multiprocessing.Process(target=target, args=args) for args in argument_lists]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0


def test_concurrent_appends_never_tear_or_lose_lines(tmp_path):
    path = tmp_path / "records.jsonl"
    _in_parallel(_append_many, [(str(path), w, 60) for w in range(4)])
    rows = read_json_lines(path)
    assert len(rows) == 240
    assert len(path.read_text().splitlines()) == 240
    assert {(r["writer"], r["index"]) for r in rows} == {
        (w, i) for w in range(4) for i in range(60)
    }


def test_torn_last_line_is_skipped_and_not_glued_to_the_next(tmp_path):
    path = tmp_path / "records.jsonl"
    append_lines(path, [json.dumps({"n": 1})])
    with open(path, "a") as handle:
        handle.write('{"n": 2, "unfinished')  # a writer killed mid-line
    assert read_json_lines(path) == [{"n": 1}]
    append_lines(path, [json.dumps({"n": 3})])
    assert read_json_lines(path) == [{"n": 1}, {"n": 3}]


def test_target_key_ignores_everything_but_kind_and_arch():
    a = {"kind": "llvm", "mcpu": "skylake", "num-cores": 2, "keys": ["cpu"]}
    b = {"kind": "llvm", "mcpu": "skylake", "num-cores": 16, "mtriple": "x86_64"}
    assert target_key(a) == target_key(b)
    assert target_key(a) != target_key({**a, "mcpu": "znver3"})
    assert target_key({"kind": "cuda", "arch": "sm_90"}) != target_key(
        {"kind": "cuda", "arch": "sm_80"}
    )
