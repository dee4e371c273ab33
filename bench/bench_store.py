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

WORDS = [
    "the",
    "model",
    "answer",
    "prompt",
    "reward",
    "policy",
    "gradient",
    "token",
    "river",
    "mountain",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "data",
    "train",
    "test",
    "split",
    "human",
    "judge",
    "rank",
    "prefer",
    "better",
    "worse",
    "explain",
    "because",
    "therefore",
    "example",
    "python",
    "function",
    "value",
    "list",
    "return",
    "error",
    "fix",
]


def sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)).capitalize() + "."


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


def fast_path(url: str, path: Path, out_dir: Path, bulk: str = "core", more: Path | None = None) -> dict:
    spent = time_bulk_calls(bulk)
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


PEER_QUERY = """
COPY (
  WITH r AS (SELECT row_number() OVER () AS rid, prompt, responses, ranking
             FROM read_json(?, format = 'newline_delimited',
                            columns = {prompt: 'VARCHAR', responses: 'VARCHAR[]', ranking: 'INTEGER[][]'})),
  tiers AS (SELECT rid, unnest(ranking) AS tier, generate_subscripts(ranking, 1) AS pos FROM r),
  items AS (SELECT rid, pos, unnest(tier) AS idx FROM tiers)
  SELECT r.prompt, r.responses[a.idx + 1] AS chosen, r.responses[b.idx + 1] AS rejected,
         (b.pos - a.pos)::DOUBLE AS margin
  FROM items a JOIN items b ON a.rid = b.rid AND a.pos < b.pos JOIN r ON r.rid = a.rid
) TO '{out}' (FORMAT parquet)
"""


def peer(path: Path, out: Path) -> dict:
    """The one-shot DuckDB query a user might write instead: JSONL in, every tier pair out as Parquet."""
    import duckdb

    t, cpu = time.perf_counter(), time.process_time()
    con = duckdb.connect()
    con.execute(PEER_QUERY.replace("{out}", str(out)), [str(path)])  # our own temporary path
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    pairs = con.execute("SELECT count(*) FROM read_parquet(?)", [str(out)]).fetchone()[0]
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "pairs": pairs,
        "peak_rss_mb": peak_rss_mb(),
        "duckdb": duckdb.__version__,
    }


def baseline(url: str, path: Path, limit: int) -> dict:
    """Row-by-row ORM: a SELECT per prompt/candidate/annotator, an INSERT per row, a Python pair loop."""
    from sqlalchemy import delete, select

    from preflab.db.engine import open_database, session_factory
    from preflab.db.models import (
        Annotator,
        Candidate,
        Comparison,
        PairBuild,
        Prompt,
        Ranking,
        RankingItem,
        RawRecord,
    )
    from preflab.db.store import content_hash, new_pseudonym, payload_hash

    sessions = session_factory(open_database(url))
    t = time.perf_counter()
    n = 0
    with sessions.begin() as s, path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if n >= limit:
                break
            s.add(RawRecord(source="baseline", locator=str(number), payload=line, payload_hash=payload_hash(line)))
            rec = json.loads(line)
            h = content_hash(rec["prompt"])
            prompt = s.scalar(select(Prompt).where(Prompt.content_hash == h))
            if prompt is None:
                prompt = Prompt(text=rec["prompt"], content_hash=h)
                s.add(prompt)
                s.flush()
            annotator = s.scalar(select(Annotator).where(Annotator.name == rec["annotator"]))
            if annotator is None:
                annotator = Annotator(kind="human", name=rec["annotator"], pseudonym=new_pseudonym("human"))
                s.add(annotator)
                s.flush()
            ids = []
            for text in rec["responses"]:
                ch = content_hash(text)
                cand = s.scalar(select(Candidate).where(Candidate.prompt_id == prompt.id, Candidate.content_hash == ch))
                if cand is None:
                    cand = Candidate(prompt_id=prompt.id, text=text, content_hash=ch)
                    s.add(cand)
                    s.flush()
                ids.append(cand.id)
            ranking = Ranking(
                prompt_id=prompt.id,
                annotator_id=annotator.id,
                source="baseline",
                external_id=rec["id"],
                n_tiers=len(rec["ranking"]),
            )
            s.add(ranking)
            s.flush()
            tier_of = {i: t for t, tier in enumerate(rec["ranking"]) for i in tier}
            for pos, cid in enumerate(ids):
                s.add(RankingItem(ranking_id=ranking.id, candidate_id=cid, tier=tier_of.get(pos), shown_position=pos))
            n += 1
    import_seconds = time.perf_counter() - t
    t = time.perf_counter()
    pairs = 0
    with sessions.begin() as s:
        s.execute(delete(Comparison))
        build = PairBuild(strategy="all", aggregate="none", annotator_kind="any")
        s.add(build)
        s.flush()
        for ranking in s.scalars(select(Ranking).where(Ranking.source == "baseline")):
            items = [i for i in ranking.items if i.tier is not None]
            for a in items:
                for b in items:
                    if a.tier < b.tier:
                        s.add(
                            Comparison(
                                build_id=build.id,
                                prompt_id=ranking.prompt_id,
                                chosen_id=a.candidate_id,
                                rejected_id=b.candidate_id,
                                ranking_id=ranking.id,
                                annotator_kind="human",
                                margin=float(b.tier - a.tier),
                                weight=1.0,
                            )
                        )
                        pairs += 1
    return {
        "import": {"seconds": import_seconds, "rankings": n},
        "pairs": {"seconds": time.perf_counter() - t, "pairs": pairs},
    }


def run_one(database: str, kind: str, path: Path, limit: int, work: Path, more: Path | None) -> dict:
    """One measurement in this (fresh) process: prints JSON."""
    if kind == "peer":
        return peer(path, work / "pairs.parquet")
    drop = None
    if database == "sqlite":
        url = f"sqlite:///{work / f'{kind}.db'}"
    else:
        url, drop = postgres_schema_url()
    try:
        result = baseline(url, path, limit) if kind == "baseline" else fast_path(url, path, work / "export", kind, more)
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


def whole_path(fast: dict) -> float:
    return sum(fast[s]["seconds"] for s in ("import", "pairs", "export"))


def median_run(runs: list[dict]) -> dict:
    """The run whose whole path is the median (the lower middle one of an even count)."""
    ordered = sorted(runs, key=whole_path)
    return ordered[(len(ordered) - 1) // 2]


def print_peer(result: dict) -> None:
    print(
        f"peer (DuckDB {result['duckdb']}, one query: read_json, self-join, COPY to Parquet): "
        f"{result['pairs']:,} pairs in {result['seconds']:.2f} s ({result['cpu_seconds']:.2f} s CPU), "
        f"peak RSS {result['peak_rss_mb']:.0f} MB"
    )


def print_report(database: str, fast: dict, base: dict | None, peer_result: dict) -> None:
    imp_rate = fast["import"]["rankings"] / fast["import"]["seconds"]
    pair_rate = fast["pairs"]["pairs"] / fast["pairs"]["seconds"]
    export_rate = fast["export"]["pairs"] / fast["export"]["seconds"]
    total = whole_path(fast)
    total_cpu = sum(fast[s]["cpu_seconds"] for s in ("import", "pairs", "export"))
    if base:
        base_imp_rate = base["import"]["rankings"] / base["import"]["seconds"]
        base_pair_rate = base["pairs"]["pairs"] / base["pairs"]["seconds"]
        vs_import = (
            f" (baseline {base_imp_rate:,.0f}/s on {base['import']['rankings']:,}; {imp_rate / base_imp_rate:.1f}x)"
        )
        vs_pairs = f" (baseline {base_pair_rate:,.0f}/s; {pair_rate / base_pair_rate:.1f}x)"
    else:
        vs_import = vs_pairs = ""
    print(f"\n== {database} (bulk: {fast['bulk']}) ==")
    cpu = {stage: f" ({fast[stage]['cpu_seconds']:.1f} s CPU)" for stage in ("import", "pairs", "export")}
    print(
        f"import : {fast['import']['rankings']:,} rankings in {fast['import']['seconds']:.1f} s{cpu['import']} = "
        f"{imp_rate:,.0f} rankings/s{vs_import} peak RSS {fast['import']['peak_rss_mb']:.0f} MB"
    )
    print(
        f"pairs  : {fast['pairs']['pairs']:,} pairs in {fast['pairs']['seconds']:.1f} s{cpu['pairs']} = "
        f"{pair_rate:,.0f} pairs/s{vs_pairs} peak RSS {fast['pairs']['peak_rss_mb']:.0f} MB"
    )
    print(
        f"export : {fast['export']['pairs']:,} pairs in {fast['export']['seconds']:.1f} s{cpu['export']} = "
        f"{export_rate:,.0f} pairs/s, peak RSS {fast['export']['peak_rss_mb']:.0f} MB"
    )
    print(
        f"total  : {total:.1f} s for the whole path ({total_cpu:.1f} s CPU) = {total / peer_result['seconds']:.1f}x "
        f"the peer's {peer_result['seconds']:.2f} s (load average {fast['load_before']:.1f} before, "
        f"{fast['load_after']:.1f} after)"
    )
    if "more" in fast:
        more = fast["more"]
        inc, full = more["incremental"], more["full"]
        print(
            f"more   : {more['rankings']:,} rankings imported in {more['import_seconds']:.2f} s; pairs rebuilt "
            f"incrementally in {inc['seconds']:.2f} s ({inc['cpu_seconds']:.2f} s CPU; {inc['changed']:,} rankings "
            f"changed), in full in {full['seconds']:.2f} s ({full['cpu_seconds']:.2f} s CPU): "
            f"{inc['pairs']:,} pairs both ways; peak RSS {more['peak_rss_mb']:.0f} MB"
        )


def print_bulk_comparison(runs: dict, sides: list[str]) -> None:
    """Median seconds per stage and inside the bulk functions, per implementation; ratio = first / second."""
    first, second = sides[:2]

    def median(side: str, stage: str, op: str | None = None, key: str = "seconds") -> float:
        return statistics.median(r[stage]["in_bulk"][op][key] if op else r[stage][key] for r in runs[side])

    loads = [r[k] for side in sides for r in runs[side] for k in ("load_before", "load_after")]
    print(
        f"bulk, {first} vs {second} (median of {len(runs[first])} each; ratio = {first} / {second}, "
        f"> 1: {second} faster; load average {min(loads):.1f}–{max(loads):.1f})"
    )
    for stage in ("import", "pairs", "export"):
        a, b = median(first, stage), median(second, stage)
        print(f"  {stage:<6} stage: {first} {a:6.2f} s, {second} {b:6.2f} s, ratio {a / b:.2f}")
        for op in ("insert_rows", "lookup"):
            done = runs[first][0][stage]["in_bulk"][op]
            if not done["calls"]:
                continue
            a, b = median(first, stage, op), median(second, stage, op)
            ca, cb = median(first, stage, op, "cpu_seconds"), median(second, stage, op, "cpu_seconds")
            unit = "rows" if op == "insert_rows" else "values"
            print(
                f"    {op:<11}: {first} {a:6.2f} s, {second} {b:6.2f} s, ratio {a / b:.2f}; "
                f"CPU {ca:.2f} s vs {cb:.2f} s, ratio {ca / cb:.2f} "
                f"({done['rows']:,} {unit} in {done['calls']:,} calls)"
            )


if __name__ == "__main__":
    main()
