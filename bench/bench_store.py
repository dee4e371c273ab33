"""Import + pairs build + export of many rankings: preflab's path against a row-by-row baseline.

Usage: python bench/bench_store.py [--rankings 100000] [--baseline-rankings 3000]
                                   [--database sqlite|postgres|both] [--bulk core driver] [--repeat 1]

The fast path is preflab's own library (batched INSERT … ON CONFLICT, pairs
expanded by one INSERT … SELECT, export streamed to Parquet). The baseline is
what one writes first: an ORM object per row with a lookup per prompt and
candidate, and pairs expanded in a Python loop and added one by one. The
baseline runs on fewer rankings (it is slow); rates are compared per second.
Peak RSS is the process's high-water mark after each fast stage (the fast path
runs first, in a fresh process per database).

The fast path runs with each implementation of bulk inserts and lookups named
by `--bulk` (`--repeat` times each, alternating), each in a fresh process on a
fresh database and the same file: `core` is preflab.db.bulk (SQLAlchemy Core
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

from common import peak_rss_mb, postgres_schema_url

WORDS = ("the model answer prompt reward policy gradient token river mountain quick brown fox "
         "jumps over lazy dog data train test split human judge rank prefer better worse "
         "explain because therefore example python function value list return error fix").split()


def sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)).capitalize() + "."


def write_rankings(path: Path, n_rankings: int, seed: int = 0) -> int:
    """n rankings of 4–9 candidates over n/2.5 prompts (several annotators per prompt)."""
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
                tiers.append(order[t:t + size])
                t += size
            out.write(json.dumps({
                "prompt": f"Prompt {p}: " + sentence(prng, prng.randint(8, 20)), "responses": responses,
                "ranking": tiers, "annotator": f"annotator-{i // n_prompts}", "annotator_kind": "human",
                "id": f"bench-{i}"}) + "\n")
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
    spent = {name: {"seconds": 0.0, "cpu_seconds": 0.0, "calls": 0, "rows": 0} for name in ("insert_rows", "lookup")}
    insert_rows, lookup = {"core": (bulk.insert_rows, bulk.lookup),
                           "driver": (driver_insert_rows, driver_lookup)}[implementation]

    def add(name: str, started: tuple[float, float], rows: int) -> None:
        spent[name]["seconds"] += time.perf_counter() - started[0]
        spent[name]["cpu_seconds"] += time.process_time() - started[1]
        spent[name]["calls"] += 1
        spent[name]["rows"] += rows

    def timed_insert_rows(session, table, rows, conflict=None):
        t = time.perf_counter(), time.process_time()
        insert_rows(session, table, rows, conflict)
        add("insert_rows", t, len(rows))

    def timed_lookup(session, table, columns, key, values):
        values = list(values)
        t = time.perf_counter(), time.process_time()
        found = lookup(session, table, columns, key, values)
        add("lookup", t, len(values))
        return found

    bulk.insert_rows, bulk.lookup = timed_insert_rows, timed_lookup
    return spent


def snapshot(spent: dict) -> dict:
    """The totals so far; a stage's share is the difference of two snapshots."""
    return {name: dict(totals) for name, totals in spent.items()}


def since(before: dict, spent: dict) -> dict:
    return {name: {k: spent[name][k] - before[name][k] for k in totals} for name, totals in spent.items()}


def fast_path(url: str, path: Path, out_dir: Path, bulk: str = "core") -> dict:
    spent = time_bulk_calls(bulk)
    from preflab.db.engine import open_database, session_factory
    from preflab.db.export import ExportSettings, export_dataset
    from preflab.db.ingest import import_file, import_rankings_batch
    from preflab.db.pairs import build_pairs

    sessions = session_factory(open_database(url))
    result = {"bulk": bulk, "load_before": os.getloadavg()[0]}
    t, before = time.perf_counter(), snapshot(spent)
    summary = import_file(sessions, path, import_rankings_batch)
    result["import"] = {"seconds": time.perf_counter() - t, "rankings": summary.imported,
                        "peak_rss_mb": peak_rss_mb(), "in_bulk": since(before, spent)}
    t, before = time.perf_counter(), snapshot(spent)
    with sessions.begin() as session:
        built = build_pairs(session)
    result["pairs"] = {"seconds": time.perf_counter() - t, "pairs": built.pairs, "peak_rss_mb": peak_rss_mb(),
                       "in_bulk": since(before, spent)}
    t, before = time.perf_counter(), snapshot(spent)
    with sessions.begin() as session:
        version = export_dataset(session, out_dir, ExportSettings(format="parquet"))
    result["export"] = {"seconds": time.perf_counter() - t, "pairs": version.n_train + version.n_test,
                        "peak_rss_mb": peak_rss_mb(), "in_bulk": since(before, spent)}
    result["load_after"] = os.getloadavg()[0]
    return result


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
            ranking = Ranking(prompt_id=prompt.id, annotator_id=annotator.id, source="baseline",
                              external_id=rec["id"], n_tiers=len(rec["ranking"]))
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
                        s.add(Comparison(build_id=build.id, prompt_id=ranking.prompt_id, chosen_id=a.candidate_id,
                                         rejected_id=b.candidate_id, ranking_id=ranking.id,
                                         annotator_kind="human",
                                         margin=float(b.tier - a.tier), weight=1.0))
                        pairs += 1
    return {"import": {"seconds": import_seconds, "rankings": n},
            "pairs": {"seconds": time.perf_counter() - t, "pairs": pairs}}




def run_one(database: str, kind: str, path: Path, limit: int, work: Path) -> dict:
    """One measurement in this (fresh) process: prints JSON."""
    drop = None
    if database == "sqlite":
        url = f"sqlite:///{work / f'{kind}.db'}"
    else:
        url, drop = postgres_schema_url()
    try:
        result = baseline(url, path, limit) if kind == "baseline" else fast_path(url, path, work / "export", kind)
    finally:
        from preflab.db.engine import dispose_all

        dispose_all()
        if drop:
            drop()
    return result


def child(database: str, kind: str, work: Path, path: Path, limit: int) -> dict:
    """Run one measurement (`kind`: core, driver or baseline) in a fresh process."""
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", database, kind, str(work), "--input", str(path),
         "--baseline-rankings", str(limit)],
        capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rankings", type=int, default=100_000)
    parser.add_argument("--baseline-rankings", type=int, default=3_000, help="0 skips the baseline")
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--bulk", nargs="+", choices=["core", "driver"], default=["core", "driver"],
                        help="bulk insert/lookup implementations to run the fast path with (core: preflab.db.bulk; "
                             "driver: the driver-level path it replaced); the first is reported against the baseline")
    parser.add_argument("--repeat", type=int, default=1, help="fast-path runs per implementation, alternating")
    parser.add_argument("--child", nargs=3, metavar=("DATABASE", "KIND", "WORKDIR"), help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        database, kind, work = args.child
        print(json.dumps(run_one(database, kind, Path(args.input), args.baseline_rankings, Path(work))))
        return

    with tempfile.TemporaryDirectory(prefix="preflab-bench-") as tmp:
        tmp = Path(tmp)
        path = tmp / "rankings.jsonl"
        t = time.perf_counter()
        write_rankings(path, args.rankings)
        print(f"generated {args.rankings:,} rankings ({path.stat().st_size / 1e6:.0f} MB) "
              f"in {time.perf_counter() - t:.1f} s")
        databases = ["sqlite", "postgres"] if args.database == "both" else [args.database]
        report = {}
        for database in databases:
            runs = {bulk: [] for bulk in args.bulk}
            for attempt in range(args.repeat):
                for bulk in args.bulk:
                    work = tmp / f"{database}-{bulk}-{attempt}"
                    runs[bulk].append(child(database, bulk, work, path, args.baseline_rankings))
            if args.baseline_rankings:
                runs["baseline"] = child(database, "baseline", tmp / f"{database}-baseline", path,
                                         args.baseline_rankings)
            report[database] = runs
            print_report(database, runs[args.bulk[0]][0], runs.get("baseline"))
            if len(args.bulk) > 1:
                print_bulk_comparison(runs, args.bulk)
        Path(tmp, "report.json").write_text(json.dumps(report))
        print(json.dumps(report))


def print_report(database: str, fast: dict, base: dict | None) -> None:
    imp_rate = fast["import"]["rankings"] / fast["import"]["seconds"]
    pair_rate = fast["pairs"]["pairs"] / fast["pairs"]["seconds"]
    export_rate = fast["export"]["pairs"] / fast["export"]["seconds"]
    total = sum(fast[s]["seconds"] for s in ("import", "pairs", "export"))
    if base:
        base_imp_rate = base["import"]["rankings"] / base["import"]["seconds"]
        base_pair_rate = base["pairs"]["pairs"] / base["pairs"]["seconds"]
        vs_import = (f" (baseline {base_imp_rate:,.0f}/s on {base['import']['rankings']:,}; "
                     f"{imp_rate / base_imp_rate:.1f}x)")
        vs_pairs = f" (baseline {base_pair_rate:,.0f}/s; {pair_rate / base_pair_rate:.1f}x)"
    else:
        vs_import = vs_pairs = ""
    print(f"\n== {database} (bulk: {fast['bulk']}) ==")
    print(f"import : {fast['import']['rankings']:,} rankings in {fast['import']['seconds']:.1f} s = "
          f"{imp_rate:,.0f} rankings/s{vs_import} peak RSS {fast['import']['peak_rss_mb']:.0f} MB")
    print(f"pairs  : {fast['pairs']['pairs']:,} pairs in {fast['pairs']['seconds']:.1f} s = {pair_rate:,.0f} pairs/s"
          f"{vs_pairs} peak RSS {fast['pairs']['peak_rss_mb']:.0f} MB")
    print(f"export : {fast['export']['pairs']:,} pairs in {fast['export']['seconds']:.1f} s = "
          f"{export_rate:,.0f} pairs/s, peak RSS {fast['export']['peak_rss_mb']:.0f} MB")
    print(f"total  : {total:.1f} s for the whole path")


def print_bulk_comparison(runs: dict, sides: list[str]) -> None:
    """Median seconds per stage and inside the bulk functions, per implementation; ratio = first / second."""
    first, second = sides[:2]

    def median(side: str, stage: str, op: str | None = None, key: str = "seconds") -> float:
        return statistics.median(r[stage]["in_bulk"][op][key] if op else r[stage][key] for r in runs[side])

    loads = [r[k] for side in sides for r in runs[side] for k in ("load_before", "load_after")]
    print(f"bulk, {first} vs {second} (median of {len(runs[first])} each; ratio = {first} / {second}, "
          f"> 1: {second} faster; load average {min(loads):.1f}–{max(loads):.1f})")
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
            print(f"    {op:<11}: {first} {a:6.2f} s, {second} {b:6.2f} s, ratio {a / b:.2f}; "
                  f"CPU {ca:.2f} s vs {cb:.2f} s, ratio {ca / cb:.2f} "
                  f"({done['rows']:,} {unit} in {done['calls']:,} calls)")


if __name__ == "__main__":
    main()
