"""The SQLite record store under load, and a job's start-up against a large store.

(a) Concurrency: ``--writers`` processes (default 100) each commit ``--writer-records``
    real-sized records, a tenth of them twice (a retried commit), while ``--readers``
    processes keep asking for the best records of every workload. Afterwards every
    record a writer committed is looked for: lost, duplicated and unreadable counts.
(b) Start-up: a store of ``--records`` synthetic records (default 1,000,000) spread over
    ResNet-18-sized workloads, of which a job's 20 are asked for their best N records
    (TRANSFER_RECORDS, what TuningJob warms its cost model with) in a fresh process:
    wall time and peak RSS of the read, then of decoding them into MetaSchedule
    TuningRecords (which replays each trace: the same cost per record in any design).
    Side by side, the JSON-lines design of earlier versions (read the whole
    ``records.jsonl``, keep each workload's best N) on a store of ``--jsonl-records``
    (default 20,000); that design also decoded every record of the store, not N.

Records are made like real ones: the traces are MetaSchedule design-space traces of
ResNet-18's convolutions (NHWC, this host's target), with random measurements.

    python bench/record_store.py --dir /tmp/record-bench [--records 1000000] [--keep]

Results: bench/results/record_store.json (and BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common

from bench.common.synthetic_records import make_templates, synthetic, workload_keys

RESULTS = Path(__file__).resolve().parent / "results" / "record_store.json"
JOB_WORKLOADS = 20  # a ResNet-18 job has 19-21 tasks
RECORDS_PER_WORKLOAD = 500  # how the synthetic store spreads its records


# ---- (a) concurrency ------------------------------------------------------------------
def _writer(path: str, templates: list[dict], writer: int, count: int, out: str) -> None:
    from simpletvm.tuning.records import RecordStore, canonical_json

    records = RecordStore(path)
    rng = random.Random(writer)
    committed, waits = [], []
    for index in range(count):
        template = templates[index % len(templates)]
        record = synthetic(template, rng)
        start = time.perf_counter()
        records.add(
            template["workload"], template["workload_json"], [record], run_id=f"writer{writer}"
        )
        waits.append(time.perf_counter() - start)
        if index % 10 == 0:  # a retried commit of the same record
            records.add(
                template["workload"], template["workload_json"], [record], run_id=f"writer{writer}"
            )
        committed.append(canonical_json(record))
    Path(out).write_text(json.dumps({"committed": committed, "waits": waits}))


def _reader(path: str, keys: list[str], target: str, stop, out: str) -> None:
    from simpletvm.tuning.records import RecordStore

    records = RecordStore(path)
    queries = unreadable = rows_read = 0
    latencies = []
    while not stop.is_set():
        for key in keys:
            start = time.perf_counter()
            try:
                rows = records.top(key, target, 8) + records.top(key, target, 1, best_only=True)
                unreadable += sum(1 for row in rows if not _readable(row))
                rows_read += len(rows)
            except Exception:  # noqa: BLE001 - a failed query is a failure to read
                unreadable += 1
            latencies.append(time.perf_counter() - start)
            queries += 1
    Path(out).write_text(
        json.dumps(
            {
                "queries": queries,
                "unreadable": unreadable,
                "rows_read": rows_read,
                "latencies": latencies,
            }
        )
    )


def _readable(row) -> bool:
    return isinstance(row, list) and len(row) == 4 and len(row[1]) == 5 and bool(row[0])


def concurrency(
    work: Path, templates: list[dict], writers: int, per_writer: int, readers: int
) -> dict:
    from simpletvm.tuning.records import RecordStore, target_key

    path = work / "concurrency.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    RecordStore(path).count()  # schema
    target = target_key(templates[0]["record"][2])
    fork = multiprocessing.get_context("fork")
    stop = fork.Event()
    outs = work / "concurrency-out"
    shutil.rmtree(outs, ignore_errors=True)
    outs.mkdir()
    keys = [t["workload"] for t in templates]
    reading = [
        fork.Process(target=_reader, args=(str(path), keys, target, stop, str(outs / f"r{i}.json")))
        for i in range(readers)
    ]
    writing = [
        fork.Process(
            target=_writer, args=(str(path), templates, w, per_writer, str(outs / f"w{w}.json"))
        )
        for w in range(writers)
    ]
    start = time.perf_counter()
    for process in reading + writing:
        process.start()
    for process in writing:
        process.join()
    elapsed = time.perf_counter() - start
    stop.set()
    for process in reading:
        process.join()
    failed = sum(1 for p in reading + writing if p.exitcode != 0)
    written = [
        json.loads((outs / f"w{w}.json").read_text())
        for w in range(writers)
        if (outs / f"w{w}.json").exists()
    ]
    read = [
        json.loads((outs / f"r{i}.json").read_text())
        for i in range(readers)
        if (outs / f"r{i}.json").exists()
    ]

    records = RecordStore(path)
    connection = sqlite3.connect(path)
    stored: dict[str, int] = {}
    unreadable_rows = 0
    for (text,) in connection.execute("SELECT json FROM records"):
        try:
            ok = _readable(json.loads(text))
        except json.JSONDecodeError:
            ok = False
        unreadable_rows += not ok
        stored[text] = stored.get(text, 0) + 1
    committed = [text for result in written for text in result["committed"]]
    best_wrong = sum(
        1
        for (key, tkey), latency in records.best().items()
        if latency
        != connection.execute(
            "SELECT MIN(r.latency_s) FROM records r JOIN workloads w ON "
            "w.id = r.workload_id WHERE w.key = ? AND r.target_key = ?",
            (key, tkey),
        ).fetchone()[0]
    )
    waits = sorted(w for result in written for w in result["waits"])
    query_times = sorted(t for result in read for t in result["latencies"])
    return {
        "writers": writers,
        "records_per_writer": per_writer,
        "readers": readers,
        "record_bytes_mean": round(sum(map(len, committed)) / max(1, len(committed))),
        "processes_failed": failed,
        "committed": len(committed),
        "stored": sum(stored.values()),
        "lost": sum(1 for text in set(committed) if text not in stored),
        "duplicated": sum(n - 1 for n in stored.values() if n > 1),
        "unreadable": unreadable_rows + sum(r["unreadable"] for r in read),
        "best_rows_wrong": best_wrong,
        "reader_queries": sum(r["queries"] for r in read),
        "reader_rows_read": sum(r["rows_read"] for r in read),
        "write_s": round(elapsed, 2),
        "commit_wait_ms": _quantiles(waits),
        "reader_query_ms": _quantiles(query_times),
    }


def _quantiles(values: list[float]) -> dict:
    if not values:
        return {}
    pick = lambda q: round(values[min(len(values) - 1, int(q * len(values)))] * 1e3, 2)  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "max": round(values[-1] * 1e3, 2)}


# ---- (b) start-up ---------------------------------------------------------------------
def fill_sqlite(path: Path, templates: list[dict], count: int, batch: int = 2000) -> dict:
    """A store of ``count`` records, inserted through the store's own code path."""
    from simpletvm.tuning.records import RecordStore, insert

    records = RecordStore(path)
    have = records.count()
    keys = workload_keys(templates, max(JOB_WORKLOADS, count // RECORDS_PER_WORKLOAD))
    rng = random.Random(have)
    start = time.perf_counter()
    done = have
    while done < count:
        rows, workloads = [], {}
        for index in range(done, min(count, done + batch)):
            key, template = keys[index % len(keys)]
            rows.append((key, synthetic(template, rng), f"run{index // 5000}", time.time()))
            workloads[key] = template["workload_json"]
        with records.transaction() as connection:
            insert(connection, rows, workloads)
        done += len(rows)
        if done % 100_000 < batch:
            print(f"  {done:,} records, {time.perf_counter() - start:.0f} s", flush=True)
    return {
        "records": records.count(),
        "workloads": len(keys),
        "fill_s": round(time.perf_counter() - start, 1),
        "bytes": sum(
            os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}")
        ),
    }


def fill_jsonl(directory: Path, templates: list[dict], count: int) -> dict:
    """The same kind of store as JSON lines, as the earlier versions wrote it."""
    from simpletvm.store import append_lines
    from simpletvm.tuning.records import target_key

    directory.mkdir(parents=True, exist_ok=True)
    keys = workload_keys(templates, max(JOB_WORKLOADS, count // RECORDS_PER_WORKLOAD))
    (directory / "workloads.jsonl").write_text(
        "".join(
            json.dumps({"workload": key, "json": template["workload_json"]}) + "\n"
            for key, template in keys
        )
    )
    rng = random.Random(0)
    path = directory / "records.jsonl"
    path.unlink(missing_ok=True)
    for start in range(0, count, 2000):
        lines = []
        for index in range(start, min(count, start + 2000)):
            key, template = keys[index % len(keys)]
            record = synthetic(template, rng)
            lines.append(
                json.dumps(
                    {
                        "workload": key,
                        "record": record,
                        "target_key": target_key(record[2]),
                        "latency_s": sum(record[1]) / 5,
                        "run_id": f"run{index // 5000}",
                        "time": time.time(),
                    }
                )
            )
        append_lines(path, lines)
    return {"records": count, "workloads": len(keys), "bytes": path.stat().st_size}


STARTUP_SCRIPT = textwrap.dedent("""
    import json, resource, sys, time
    sys.path.insert(0, sys.argv[1])
    design, store, templates_path = sys.argv[2], sys.argv[3], sys.argv[4]
    from tvm.s_tir import meta_schedule as ms
    from simpletvm.targets import resolve_target
    from simpletvm.tuning.job import TRANSFER_RECORDS
    from simpletvm.tuning.records import target_key
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    templates = json.load(open(templates_path))[:int(sys.argv[5])]
    target = resolve_target("cpu").tvm_target()
    key = target_key(json.loads(str(target)))
    workloads = {t["workload"]: ms.database.Workload.from_json(t["workload_json"])
                 for t in templates}  # the job has its tasks' modules already
    del templates
    rss_before = rss()
    start = time.perf_counter()
    if design == "sqlite":  # an index lookup per workload
        from simpletvm.tuning.records import RecordStore
        records = RecordStore(store)
        best = {w: records.top(w, key, TRANSFER_RECORDS) for w in workloads}
    else:  # the JSON-lines design: the whole file, then each workload's best
        from pathlib import Path
        from simpletvm.store import read_json_lines
        rows = [r for r in read_json_lines(Path(store) / "records.jsonl")
                if r.get("target_key") == key and r["workload"] in workloads]
        best = {w: [r["record"] for r in sorted((r for r in rows if r["workload"] == w),
                                                key=lambda r: r["latency_s"])][:TRANSFER_RECORDS]
                for w in workloads}
        del rows
    read_s, read_rss = time.perf_counter() - start, rss()
    decoded = [ms.database.TuningRecord.from_json(record, workloads[w])
               for w, records_ in best.items() for record in records_]
    total_s = time.perf_counter() - start
    print(json.dumps({"read_s": read_s, "total_s": total_s, "records_read": len(decoded),
                      "decode_ms_per_record": (total_s - read_s) / max(1, len(decoded)) * 1e3,
                      "rss_before_mb": rss_before, "read_peak_rss_mb": read_rss,
                      "peak_rss_mb": rss()}))
""")


def startup(design: str, store: Path, templates_path: Path, repeat: int) -> dict:
    """Reading a job's transfer-learning records, in fresh processes: the first run,
    then the fastest of ``repeat`` more."""
    runs = []
    for _ in range(1 + repeat):
        output = subprocess.run(
            [
                sys.executable,
                "-c",
                STARTUP_SCRIPT,
                str(Path(__file__).resolve().parent.parent),
                design,
                str(store),
                str(templates_path),
                str(JOB_WORKLOADS),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runs.append(json.loads(output.strip().splitlines()[-1]))
    best = min(runs[1:] or runs, key=lambda r: r["read_s"])
    return {
        "first_read_s": round(runs[0]["read_s"], 2),
        "read_s": round(best["read_s"], 2),
        "read_and_decode_s": round(best["total_s"], 2),
        "decode_ms_per_record": round(best["decode_ms_per_record"], 1),
        "records_read": best["records_read"],
        "rss_after_import_mb": round(best["rss_before_mb"]),
        "read_peak_rss_mb": round(max(r["read_peak_rss_mb"] for r in runs)),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir",
        type=Path,
        required=True,
        help="where the stores go (the 1M store needs about 10 GB)",
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--jsonl-records", type=int, default=20_000)
    parser.add_argument("--writers", type=int, default=100)
    parser.add_argument("--writer-records", type=int, default=20)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2, help="warm start-ups after the first")
    parser.add_argument("--skip", choices=["concurrency", "startup"], action="append", default=[])
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    args = parser.parse_args()

    from simpletvm.tuning.records import canonical_json

    args.dir.mkdir(parents=True, exist_ok=True)
    templates_path = args.dir / "templates.json"
    templates = make_templates(templates_path, JOB_WORKLOADS)
    size = sum(len(canonical_json(t["record"])) for t in templates) / len(templates)
    print(f"{len(templates)} workloads, records of {size / 1024:.1f} KB")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results["host"] = {
        "hostname": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "note": "2 cores shared with another engineer's work: taken under load",
    }
    results["record_bytes"] = round(size)
    command = " ".join(["python", "bench/record_store.py", *sys.argv[1:]])
    if "concurrency" not in args.skip:
        print(f"(a) {args.writers} writers x {args.writer_records} records, {args.readers} readers")
        results["concurrency"] = {
            "command": command,
            **concurrency(args.dir, templates, args.writers, args.writer_records, args.readers),
        }
        print(json.dumps(results["concurrency"], indent=1))
    if "startup" not in args.skip:
        sqlite_path = args.dir / "records.sqlite"
        print(f"(b) filling {sqlite_path} with {args.records:,} records")
        sqlite_store = fill_sqlite(sqlite_path, templates, args.records)
        jsonl_dir = args.dir / "jsonl"
        print(f"    and {jsonl_dir} with {args.jsonl_records:,} JSON lines")
        jsonl_store = fill_jsonl(jsonl_dir, templates, args.jsonl_records)
        results["startup"] = {
            "command": command,
            "workloads_asked": JOB_WORKLOADS,
            "sqlite": {
                **sqlite_store,
                **startup("sqlite", sqlite_path, templates_path, args.repeat),
            },
            "json_lines": {
                **jsonl_store,
                **startup("jsonl", jsonl_dir, templates_path, args.repeat),
            },
        }
        print(json.dumps(results["startup"], indent=1))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    if not args.keep:
        for name in (
            "records.sqlite",
            "records.sqlite-wal",
            "records.sqlite-shm",
            "concurrency.sqlite",
            "concurrency.sqlite-wal",
            "concurrency.sqlite-shm",
        ):
            (args.dir / name).unlink(missing_ok=True)
        shutil.rmtree(args.dir / "jsonl", ignore_errors=True)
        shutil.rmtree(args.dir / "concurrency-out", ignore_errors=True)
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    main()
