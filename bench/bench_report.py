"""`preflab report` on the 100k-ranking store: preflab's path against loading every row into Python.

Usage: python bench/bench_report.py [--rankings 100000] [--store PATH] [--naive-agreement/--no-naive-agreement]
                                    [--sql-join] [--judge]

The store is bench_store.py's data (its `write_rankings`, imported by preflab's
own importer), built once and kept: ~/.cache/preflab-bench/report-N.db unless
--store says otherwise. Every measurement runs in a fresh process, so each peak
RSS is that process's own high-water mark.

- fast: `write_report` (build the data, draw the charts, write the page), timed
  per section through its Reporter notes;
- naive, in the same run: every prompt, candidate and ranking (with its items
  and annotator) loaded as ORM objects and counted in Python for the Data
  section, and the agreement by `preflab.db.quality.agreement.agreement` (Python loop,
  scipy's tau per ranking pair; minutes on 100k rankings: --no-naive-agreement
  skips it);
- --sql-join: the dead end, the agreement's pair comparison as one SQL self-join
  of `ranking_items` grouped by ranking pair;
- --judge: the Judges section on a copy of the store where one of the three
  annotators is made a score judge (`judge_report` then reads its 20k rankings and
  every human ranking).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import peak_rss_mb

DEFAULT_STORE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "preflab-bench"


def ensure_store(path: Path, rankings: int) -> None:
    """Build the store once: bench_store's rankings imported by preflab's importer."""
    if path.exists():
        return
    from bench_store import write_rankings

    from preflab.db.engine import open_sessions
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="preflab-bench-") as tmp:
        source = Path(tmp) / "rankings.jsonl"
        t = time.perf_counter()
        write_rankings(source, rankings)
        summary = import_file(open_sessions(f"sqlite:///{partial}"), source, import_rankings_batch)
    from preflab.db.engine import dispose_all

    dispose_all()
    partial.rename(path)
    print(f"built the store: {summary.imported:,} rankings in {time.perf_counter() - t:.0f} s -> {path}")


class Clock:
    """A Reporter that timestamps each note: `write_report` notes the start of every stage."""

    def __init__(self):
        self.enabled = True
        self.marks: list[tuple[str, float, float]] = []

    def note(self, message: str) -> None:
        self.marks.append((message.removeprefix("report: "), time.perf_counter(), time.process_time()))

    def stages(self) -> dict[str, tuple[float, float]]:
        """Stage -> (seconds, CPU seconds)."""
        ends = [*self.marks[1:], ("end", time.perf_counter(), time.process_time())]
        return {name: (end - start, cpu_end - cpu) for (name, start, cpu), (_, end, cpu_end) in zip(self.marks, ends)}


def fast(url: str, out: Path) -> dict:
    from preflab.db.engine import open_sessions
    from preflab.report.build import write_report

    clock = Clock()
    t, cpu = time.perf_counter(), time.process_time()
    with open_sessions(url).begin() as session:
        report = write_report(session, out, reporter=clock)
    return {
        "seconds": time.perf_counter() - t,
        "cpu_seconds": time.process_time() - cpu,
        "stages": clock.stages(),
        "peak_rss_mb": peak_rss_mb(),
        "sections": report["sections"],
        "bytes": out.stat().st_size,
        "agreement": report["agreement"]["categories"]["all"],
    }


def _monday(moment) -> str:
    from datetime import timedelta

    return (moment - timedelta(days=moment.weekday())).strftime("%Y-%m-%d")


def naive(url: str, agreement: bool) -> dict:
    """What one writes first: load the rows as objects, count in Python."""
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload, selectinload

    from preflab.db.engine import open_sessions
    from preflab.db.models import Candidate, Prompt, Ranking, RawRecord

    result = {}
    with open_sessions(url).begin() as session:
        t, cpu = time.perf_counter(), time.process_time()
        counts: dict[str, Counter] = {name: Counter() for name in ("prompts", "candidates", "rankings", "quarantine")}
        for prompt in session.scalars(select(Prompt)):
            counts["prompts"][(prompt.source, _monday(prompt.created_at))] += 1
        for candidate in session.scalars(select(Candidate)):
            counts["candidates"][(candidate.model, _monday(candidate.created_at))] += 1
        rankings = session.scalars(
            select(Ranking).options(selectinload(Ranking.items), joinedload(Ranking.annotator))
        ).all()
        for r in rankings:
            ranked = sum(1 for item in r.items if item.tier is not None)
            counts["rankings"][
                (r.source, r.status, r.annotator.kind, r.same_as_shown, _monday(r.created_at), ranked > 0)
            ] += 1
        for record in session.scalars(select(RawRecord).where(RawRecord.status == "quarantined")):
            counts["quarantine"][(record.source, record.reason)] += 1
        result["data"] = {
            "seconds": time.perf_counter() - t,
            "cpu_seconds": time.process_time() - cpu,
            "rankings": len(rankings),
            "peak_rss_mb": peak_rss_mb(),
        }
        del rankings
        if agreement:
            from preflab.db.quality.agreement import agreement as library_agreement

            t, cpu = time.perf_counter(), time.process_time()
            found = library_agreement(session)
            result["agreement"] = {
                "seconds": time.perf_counter() - t,
                "cpu_seconds": time.process_time() - cpu,
                "all": found["all"],
                "peak_rss_mb": peak_rss_mb(),
            }
    return result


def sql_join(url: str) -> dict:
    """The dead end: compare every two rankings of a prompt by one SQL self-join, grouped by ranking pair."""
    from sqlalchemy import and_, case, func, select
    from sqlalchemy.orm import aliased

    from preflab.db.engine import open_sessions
    from preflab.db.models import Ranking, RankingItem

    r1, r2 = aliased(Ranking), aliased(Ranking)
    x1, y1, x2, y2 = (aliased(RankingItem) for _ in range(4))
    d1, d2 = x1.tier - y1.tier, x2.tier - y2.tier

    def total(condition):
        return func.sum(case((condition, 1), else_=0))

    query = (
        select(
            r1.annotator_id,
            r2.annotator_id,
            total(d1 * d2 > 0),
            total(d1 * d2 < 0),
            func.count(),
            total(d1 == 0),
            total(d2 == 0),
        )
        .select_from(r1)
        .join(r2, and_(r2.prompt_id == r1.prompt_id, r2.id > r1.id, r2.annotator_id != r1.annotator_id))
        .join(x1, x1.ranking_id == r1.id)
        .join(y1, and_(y1.ranking_id == r1.id, y1.candidate_id > x1.candidate_id))
        .join(x2, and_(x2.ranking_id == r2.id, x2.candidate_id == x1.candidate_id))
        .join(y2, and_(y2.ranking_id == r2.id, y2.candidate_id == y1.candidate_id))
        .where(
            r1.status == "valid",
            r2.status == "valid",
            x1.tier.is_not(None),
            y1.tier.is_not(None),
            x2.tier.is_not(None),
            y2.tier.is_not(None),
        )
        .group_by(r1.id, r2.id)
    )
    t, cpu = time.perf_counter(), time.process_time()
    with open_sessions(url).begin() as session:
        rows = session.execute(query).all()
    shared = sum(con + dis for _, _, con, dis, *_ in rows)
    agree = sum(con for _, _, con, *_ in rows)
    return {
        "seconds": time.perf_counter() - t,
        "cpu_seconds": time.process_time() - cpu,
        "ranking_pairs": len(rows),
        "shared_pairs": shared,
        "pairwise_agreement": agree / shared if shared else None,
        "peak_rss_mb": peak_rss_mb(),
    }


def judge(url: str) -> dict:
    """The Judges section where one annotator of the store (a third of its rankings) is a score judge."""
    from preflab.db.engine import open_sessions
    from preflab.report.judges import judges_section

    t, cpu = time.perf_counter(), time.process_time()
    with open_sessions(url).begin() as session:
        rows = judges_section(session)
    return {
        "seconds": time.perf_counter() - t,
        "cpu_seconds": time.process_time() - cpu,
        "judges": len(rows or []),
        "rankings": rows[0]["rankings"],
        "peak_rss_mb": peak_rss_mb(),
    }


def child(kind: str, *args: str) -> dict:
    """Run one measurement in a fresh process; returns its JSON."""
    proc = subprocess.run([sys.executable, __file__, "--child", kind, *args], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_judge_copy(store: Path, folder: Path) -> Path:
    import sqlite3

    copy = folder / "judge.db"
    shutil.copyfile(store, copy)
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE annotators SET kind = 'ai', judge_kind = 'score' WHERE name = 'annotator-2'")
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rankings", type=int, default=100_000)
    parser.add_argument("--store", type=Path, help="the SQLite file (built when missing)")
    parser.add_argument(
        "--naive-agreement",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the library's Python agreement loop (minutes)",
    )
    parser.add_argument("--sql-join", action="store_true", help="also time the all-SQL agreement (the dead end)")
    parser.add_argument("--judge", action="store_true", help="also time the Judges section with one annotator a judge")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, url, *rest = args.child
        result = {
            "fast": lambda: fast(url, Path(rest[0])),
            "naive": lambda: naive(url, rest[0] == "1"),
            "sql-join": lambda: sql_join(url),
            "judge": lambda: judge(url),
        }[kind]()
        print(json.dumps(result))
        return

    store = args.store or DEFAULT_STORE / f"report-{args.rankings}.db"
    ensure_store(store, args.rankings)
    url = f"sqlite:///{store}"
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="preflab-bench-report-") as tmp:
        results = {
            "fast": child("fast", url, str(Path(tmp) / "report.html")),
            "naive": child("naive", url, "1" if args.naive_agreement else "0"),
        }
        if args.sql_join:
            results["sql_join"] = child("sql-join", url)
        if args.judge:
            results["judge"] = child("judge", f"sqlite:///{make_judge_copy(store, Path(tmp))}")
    results["load"] = {"before": load_before, "after": os.getloadavg()}
    print_results(results)
    print(json.dumps(results))


def print_results(results: dict) -> None:
    f, n = results["fast"], results["naive"]
    stages = ", ".join(f"{name} {seconds:.2f} ({cpu:.2f})" for name, (seconds, cpu) in f["stages"].items())
    load = results["load"]
    print(f"\nload average before {load['before'][0]:.1f} / after {load['after'][0]:.1f} (1 min)")
    print(
        f"report  : {f['seconds']:.1f} s ({f['cpu_seconds']:.1f} s of CPU), peak RSS {f['peak_rss_mb']:.0f} MB, "
        f"{f['bytes'] / 1e3:.0f} kB page, sections {', '.join(f['sections'])}"
    )
    print(f"          by stage, s (CPU s): {stages}")
    data = f["stages"]["data"][0]
    print(
        f"naive   : Data counted from {n['data']['rankings']:,} loaded rankings (+ prompts, candidates) in "
        f"{n['data']['seconds']:.1f} s ({n['data']['cpu_seconds']:.1f} s of CPU) vs {data:.2f} s "
        f"({n['data']['seconds'] / data:.0f}x), "
        f"peak RSS {n['data']['peak_rss_mb']:.0f} MB"
    )
    ours = f["stages"]["agreement"][0]
    if "agreement" in n:
        print(
            f"          agreement by preflab.db.quality.agreement in {n['agreement']['seconds']:.1f} s "
            f"({n['agreement']['cpu_seconds']:.1f} s of CPU) vs {ours:.2f} s "
            f"({n['agreement']['seconds'] / ours:.0f}x); same result: "
            f"{abs(n['agreement']['all']['pairwise_agreement'] - f['agreement']['pairwise_agreement']) < 1e-12}"
        )
        total = n["data"]["seconds"] + n["agreement"]["seconds"]
        print(
            f"          naive total {total:.1f} s vs the whole report {f['seconds']:.1f} s "
            f"({total / f['seconds']:.0f}x)"
        )
    if "sql_join" in results:
        s = results["sql_join"]
        ours_cpu = f["stages"]["agreement"][1]
        print(
            f"sql join: agreement as one SQL self-join in {s['seconds']:.1f} s ({s['cpu_seconds']:.1f} s of CPU) "
            f"vs {ours:.2f} s ({ours_cpu:.2f} s of CPU): {s['cpu_seconds'] / ours_cpu:.1f}x the CPU, "
            f"{s['ranking_pairs']:,} ranking pairs"
        )
    if "judge" in results:
        j = results["judge"]
        print(
            f"judges  : one score judge with {j['rankings']:,} rankings: Judges section in {j['seconds']:.1f} s "
            f"({j['cpu_seconds']:.1f} s of CPU), peak RSS {j['peak_rss_mb']:.0f} MB"
        )


if __name__ == "__main__":
    main()
