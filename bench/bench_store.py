"""Import + pairs build + export of many rankings: preflab's path against a row-by-row baseline and a peer.

Usage: python bench/bench_store.py [--rankings 100000] [--baseline-rankings 3000] [--more 1000]
                                   [--database sqlite|postgres|both] [--bulk core [driver]] [--repeat 1]

The fast path is preflab's own library (new rows appended in batches: COPY on
Postgres; pairs expanded by one INSERT … SELECT, export streamed to Parquet).
After it, `--more` rankings are imported into the same store and the pairs
built again (incrementally, then in full for comparison). The baseline is
what one writes first: an ORM object per row with a lookup per prompt and
candidate, and pairs expanded in a Python loop and added one by one. The
baseline runs on fewer rankings (it is slow); rates are compared per second.
The peer is a one-shot DuckDB query on the same file (read_json, a self-join
over tier positions, COPY to Parquet): no provenance, quarantine, de-duplication
or splits; preflab's whole path is printed as a multiple of it.
Peak RSS is the process's high-water mark after each fast stage (the fast path
runs first, in a fresh process per database).

The fast path runs with each implementation of bulk inserts and lookups named
by `--bulk`, each in a fresh process on a fresh database and the same file,
in `--repeat` rounds that each run every database and implementation once (the
median run of each is reported, and Postgres / SQLite as the median of the
rounds' ratios): `core` is preflab.db.bulk (SQLAlchemy Core
executemany), `driver` the driver-level path bulk.py had before (kept in
driver_bulk.py to measure against). The time spent in `insert_rows` and
`lookup` is added up per stage (import: inserts and lookups; export: lookups;
pairs: neither, a control for the load on the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import cpu_seconds, peak_rss_mb, postgres_schema_url
from sentences import sentence
from store_report import median_run, print_bulk_comparison, print_peer, print_report, whole_path
from store_rivals import baseline, peer


def write_rankings(path: Path, n_rankings: int, seed: int = 0, prefix: str = "bench") -> int:
    """n rankings of 4–9 candidates over n/2.5 prompts (several annotators per prompt).

    The prompts depend only on their number, so a second file (another seed and
    `prefix`) ranks the first file's first prompts again.
    """
    rng = random.Random(seed)
    n_prompts = max(1, int(n_rankings / 2.5))
    with path.open("w", encoding="utf-8") as out:
        for i in range(n_rankings):
            p = i % n_prompts
            prng = random.Random(p)
            k = prng.randint(4, 9)
            responses = [f"[{p}.{j}] " + sentence(prng, prng.randint(12, 30)) for j in range(k)]
            order = list(range(k))
            rng.shuffle(order)
            tiers, t = [], 0
            while t < k:  # mostly strict, some ties
                size = 2 if rng.random() < 0.1 and t + 1 < k else 1
                tiers.append(order[t : t + size])
                t += size
            out.write(
                json.dumps(
                    {
                        "prompt": f"Prompt {p}: " + sentence(prng, prng.randint(8, 20)),
                        "responses": responses,
                        "ranking": tiers,
                        "annotator": f"annotator-{i // n_prompts}",
                        "annotator_kind": "human",
                        "id": f"{prefix}-{i}",
                    }
                )
                + "\n"
            )
    return n_rankings


def time_bulk_calls(implementation: str) -> dict[str, dict[str, float]]:
    """Put `implementation` into preflab.db.bulk, adding up the seconds, calls and rows spent in it.

    `implementation`: core (preflab.db.bulk's own functions) or driver
    (driver_bulk.py's). Seconds are wall and this process's CPU: CPU seconds
    leave out the Postgres server's work (the same SQL either way) and most of
    the waiting when other jobs share the cores. The store modules bind
    `insert_rows` and `lookup` when they are imported, so this must run before
    they are.
    """
    from driver_bulk import driver_insert_rows, driver_lookup

    from preflab.db import bulk

    assert "preflab.db.store" not in sys.modules, "time_bulk_calls() must run before the store is imported"
    spent = {
        name: {"seconds": 0.0, "cpu_seconds": 0.0, "calls": 0, "rows": 0}
        for name in ("insert_rows", "append_rows", "lookup")
    }
    insert_rows, lookup = {"core": (bulk.insert_rows, bulk.lookup), "driver": (driver_insert_rows, driver_lookup)}[
        implementation
    ]

    def add(name: str, started: tuple[float, float], rows: int) -> None:
        spent[name]["seconds"] += time.perf_counter() - started[0]
        spent[name]["cpu_seconds"] += time.process_time() - started[1]
        spent[name]["calls"] += 1
        spent[name]["rows"] += rows

    def timed_insert_rows(session, table, rows, conflict=None):
        t = time.perf_counter(), time.process_time()
        insert_rows(session, table, rows, conflict)
        add("insert_rows", t, len(rows))

    append_rows = bulk.append_rows

    def timed_append_rows(session, table, rows, **options):
        t = time.perf_counter(), time.process_time()
        ids = append_rows(session, table, rows, **options)
        add("append_rows", t, len(rows))
        return ids

    def timed_lookup(session, table, columns, key, values):
        values = list(values)
        t = time.perf_counter(), time.process_time()
        found = lookup(session, table, columns, key, values)
        add("lookup", t, len(values))
        return found

    bulk.insert_rows, bulk.append_rows, bulk.lookup = timed_insert_rows, timed_append_rows, timed_lookup
    return spent


def snapshot(spent: dict) -> dict:
    """The totals so far; a stage's share is the difference of two snapshots."""
    return {name: dict(totals) for name, totals in spent.items()}


def since(before: dict, spent: dict) -> dict:
    return {name: {k: spent[name][k] - before[name][k] for k in totals} for name, totals in spent.items()}


def fast_path(url: str, path: Path, out_dir: Path, spent: dict, bulk: str = "core", more: Path | None = None) -> dict:
    """The fast path on `url`, with `spent` the totals `time_bulk_calls(bulk)` adds up."""
    from preflab.db.engine import open_database, session_factory
    from preflab.db.export.dataset import ExportSettings
    from preflab.db.export.job import export_dataset
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs

    sessions = session_factory(open_database(url))
    result = {"bulk": bulk, "load_before": os.getloadavg()[0]}
    t, cpu, before = time.perf_counter(), cpu_seconds(), snapshot(spent)
    summary = import_file(sessions, path, import_rankings_batch)
    result["import"] = {
        "seconds": time.perf_counter() - t,
        "cpu_seconds": cpu_seconds() - cpu,
        "rankings": summary.imported,
        "peak_rss_mb": peak_rss_mb(),
        "in_bulk": since(before, spent),
    }
    t, cpu, before = time.perf_counter(), cpu_seconds(), snapshot(spent)
    with sessions.begin() as session:
        built = build_pairs(session)
    result["pairs"] = {
        "seconds": time.perf_counter() - t,
        "cpu_seconds": cpu_seconds() - cpu,
        "pairs": built.pairs,
        "peak_rss_mb": peak_rss_mb(),
        "in_bulk": since(before, spent),
    }
    t, cpu, before = time.perf_counter(), cpu_seconds(), snapshot(spent)
    with sessions.begin() as session:
        version = export_dataset(session, out_dir, ExportSettings(format="parquet"))
    result["export"] = {
        "seconds": time.perf_counter() - t,
        "cpu_seconds": cpu_seconds() - cpu,
        "pairs": version.n_train + version.n_test,
        "peak_rss_mb": peak_rss_mb(),
        "in_bulk": since(before, spent),
    }
    if more is not None:
        result["more"] = add_more(sessions, more)
    result["load_after"] = os.getloadavg()[0]
    return result


def add_more(sessions, path: Path) -> dict:
    """Import more rankings into the store, then build the pairs incrementally, and in full to compare."""
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs

    t = time.perf_counter()
    imported = import_file(sessions, path, import_rankings_batch).imported
    out = {"rankings": imported, "import_seconds": time.perf_counter() - t}
    for mode in ("incremental", "full"):
        t, cpu = time.perf_counter(), cpu_seconds()
        with sessions.begin() as session:
            built = build_pairs(session, full=mode == "full")
        out[mode] = {
            "seconds": time.perf_counter() - t,
            "cpu_seconds": cpu_seconds() - cpu,
            "pairs": built.pairs,
            "changed": built.changed,
            "mode": built.mode,
        }
    assert out["incremental"]["pairs"] == out["full"]["pairs"]
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def run_one(database: str, kind: str, path: Path, limit: int, work: Path, more: Path | None) -> dict:
    """One measurement in this (fresh) process: prints JSON."""
    if kind == "peer":
        return peer(path, work / "pairs.parquet")
    # Before the Postgres schema is migrated: Alembic's env.py imports the models, and through
    # preflab.db.requests the store, which binds the bulk functions as it is imported.
    spent = time_bulk_calls(kind) if kind != "baseline" else None
    drop = None
    if database == "sqlite":
        url = f"sqlite:///{work / f'{kind}.db'}"
    else:
        url, drop = postgres_schema_url()
    try:
        result = (
            baseline(url, path, limit)
            if kind == "baseline"
            else fast_path(url, path, work / "export", spent, kind, more)
        )
    finally:
        from preflab.db.engine import dispose_all

        dispose_all()
        if drop:
            drop()
    return result


def child(database: str, kind: str, work: Path, path: Path, limit: int, more: Path | None = None) -> dict:
    """Run one measurement (`kind`: core, driver, baseline or peer) in a fresh process."""
    work.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            database,
            kind,
            str(work),
            "--input",
            str(path),
            "--baseline-rankings",
            str(limit),
            *(["--more-input", str(more)] if more else []),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.exit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rankings", type=int, default=100_000)
    parser.add_argument("--baseline-rankings", type=int, default=3_000, help="0 skips the baseline")
    parser.add_argument(
        "--more",
        type=int,
        default=1_000,
        help="rankings added to the store afterwards, then pairs rebuilt incrementally (0: none)",
    )
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--bulk",
        nargs="+",
        choices=["core", "driver"],
        default=["core"],
        help="bulk insert/lookup implementations to run the fast path with (core: preflab.db.bulk; "
        "driver: the driver-level path it replaced); the first is reported against the baseline",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of fast-path runs, each running every database and implementation once",
    )
    parser.add_argument("--child", nargs=3, metavar=("DATABASE", "KIND", "WORKDIR"), help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--more-input", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        database, kind, work = args.child
        more = Path(args.more_input) if args.more_input else None
        print(json.dumps(run_one(database, kind, Path(args.input), args.baseline_rankings, Path(work), more)))
        return

    with tempfile.TemporaryDirectory(prefix="preflab-bench-") as tmp:
        tmp = Path(tmp)
        path = tmp / "rankings.jsonl"
        t = time.perf_counter()
        write_rankings(path, args.rankings)
        more = None
        if args.more:
            more = tmp / "more.jsonl"
            write_rankings(more, args.more, seed=1, prefix="more")
        print(
            f"generated {args.rankings:,} rankings ({path.stat().st_size / 1e6:.0f} MB) "
            f"in {time.perf_counter() - t:.1f} s; load average {os.getloadavg()[0]:.1f}"
        )
        report = {"peer": child("none", "peer", tmp / "peer", path, 0)}
        print_peer(report["peer"])
        databases = ["sqlite", "postgres"] if args.database == "both" else [args.database]
        runs = {database: {bulk: [] for bulk in args.bulk} for database in databases}
        # Each round runs every database and implementation once, so a machine that speeds up or
        # slows down over the run (it does: the same import varied by a third in CPU seconds)
        # weighs on each side alike.
        for attempt in range(args.repeat):
            for database in databases:
                for bulk in args.bulk:
                    work = tmp / f"{database}-{bulk}-{attempt}"
                    runs[database][bulk].append(child(database, bulk, work, path, args.baseline_rankings, more))
        for database in databases:
            if args.baseline_rankings:
                runs[database]["baseline"] = child(
                    database, "baseline", tmp / f"{database}-baseline", path, args.baseline_rankings
                )
            report[database] = runs[database]
            fast = runs[database][args.bulk[0]]
            print_report(database, median_run(fast), runs[database].get("baseline"), report["peer"])
            if len(fast) > 1:
                print(
                    f"whole path of each run: {', '.join(f'{whole_path(r):.1f} s' for r in fast)} "
                    f"(the median run is shown)"
                )
            if len(args.bulk) > 1:
                print_bulk_comparison(runs[database], args.bulk)
        if len(databases) == 2:
            pairs = [
                (whole_path(p), whole_path(s))
                for p, s in zip(runs["postgres"][args.bulk[0]], runs["sqlite"][args.bulk[0]])
            ]
            ratios = [p / q for p, q in pairs]
            medians = [statistics.median(side) for side in zip(*pairs)]
            print(
                f"\npostgres whole path / sqlite whole path: {statistics.median(ratios):.2f}x"
                + (
                    f" (median of the rounds' ratios {', '.join(f'{r:.2f}x' for r in ratios)}; ratio of the "
                    f"medians {medians[0] / medians[1]:.2f}x)"
                    if len(pairs) > 1
                    else ""
                )
            )
        print(f"load average now {os.getloadavg()[0]:.1f}")
        Path(tmp, "report.json").write_text(json.dumps(report))
        print(json.dumps(report))


if __name__ == "__main__":
    main()
