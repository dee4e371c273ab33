"""Import + pairs build + export of many rankings: preflab's path against a row-by-row baseline.

Usage: python bench/bench_store.py [--rankings 100000] [--baseline-rankings 3000]
                                   [--database sqlite|postgres|both]

The fast path is preflab's own library (batched INSERT … ON CONFLICT, pairs
expanded by one INSERT … SELECT, export streamed to Parquet). The baseline is
what one writes first: an ORM object per row with a lookup per prompt and
candidate, and pairs expanded in a Python loop and added one by one. The
baseline runs on fewer rankings (it is slow); rates are compared per second.
Peak RSS is the process's high-water mark after each fast stage (the fast path
runs first, in a fresh process per database).
"""

from __future__ import annotations

import argparse
import json
import random
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




def fast_path(url: str, path: Path, out_dir: Path) -> dict:
    from preflab.db.engine import open_database, session_factory
    from preflab.db.export import ExportSettings, export_dataset
    from preflab.db.ingest import import_file, import_rankings_batch
    from preflab.db.pairs import build_pairs

    sessions = session_factory(open_database(url))
    result = {}
    t = time.perf_counter()
    summary = import_file(sessions, path, import_rankings_batch)
    result["import"] = {"seconds": time.perf_counter() - t, "rankings": summary.imported,
                        "peak_rss_mb": peak_rss_mb()}
    t = time.perf_counter()
    with sessions.begin() as session:
        built = build_pairs(session)
    result["pairs"] = {"seconds": time.perf_counter() - t, "pairs": built.pairs, "peak_rss_mb": peak_rss_mb()}
    t = time.perf_counter()
    with sessions.begin() as session:
        version = export_dataset(session, out_dir, ExportSettings(format="parquet"))
    result["export"] = {"seconds": time.perf_counter() - t, "pairs": version.n_train + version.n_test,
                        "peak_rss_mb": peak_rss_mb()}
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
        result = fast_path(url, path, work / "export") if kind == "fast" else baseline(url, path, limit)
    finally:
        from preflab.db.engine import dispose_all

        dispose_all()
        if drop:
            drop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rankings", type=int, default=100_000)
    parser.add_argument("--baseline-rankings", type=int, default=3_000)
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
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
            runs = {}
            for kind in ("fast", "baseline"):
                work = tmp / f"{database}-{kind}"
                work.mkdir()
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", database, kind, str(work), "--input", str(path),
                     "--baseline-rankings", str(args.baseline_rankings)],
                    capture_output=True, text=True)
                if proc.returncode:
                    sys.exit(proc.stderr)
                runs[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
            report[database] = runs
            print_report(database, runs)
        Path(tmp, "report.json").write_text(json.dumps(report))
        print(json.dumps(report))


def print_report(database: str, runs: dict) -> None:
    fast, base = runs["fast"], runs["baseline"]
    imp_rate = fast["import"]["rankings"] / fast["import"]["seconds"]
    base_imp_rate = base["import"]["rankings"] / base["import"]["seconds"]
    pair_rate = fast["pairs"]["pairs"] / fast["pairs"]["seconds"]
    base_pair_rate = base["pairs"]["pairs"] / base["pairs"]["seconds"]
    export_rate = fast["export"]["pairs"] / fast["export"]["seconds"]
    total = sum(fast[s]["seconds"] for s in ("import", "pairs", "export"))
    print(f"\n== {database} ==")
    print(f"import : {fast['import']['rankings']:,} rankings in {fast['import']['seconds']:.1f} s = "
          f"{imp_rate:,.0f} rankings/s (baseline {base_imp_rate:,.0f}/s on {base['import']['rankings']:,}; "
          f"{imp_rate / base_imp_rate:.1f}x) peak RSS {fast['import']['peak_rss_mb']:.0f} MB")
    print(f"pairs  : {fast['pairs']['pairs']:,} pairs in {fast['pairs']['seconds']:.1f} s = {pair_rate:,.0f} pairs/s "
          f"(baseline {base_pair_rate:,.0f}/s; {pair_rate / base_pair_rate:.1f}x) "
          f"peak RSS {fast['pairs']['peak_rss_mb']:.0f} MB")
    print(f"export : {fast['export']['pairs']:,} pairs in {fast['export']['seconds']:.1f} s = "
          f"{export_rate:,.0f} pairs/s, peak RSS {fast['export']['peak_rss_mb']:.0f} MB")
    print(f"total  : {total:.1f} s for the whole path")


if __name__ == "__main__":
    main()
