"""Label Studio sync from an export file: preflab's streamed, batched path against a naive baseline.

Usage: python bench/bench_ls_sync.py [--tasks 10000] [--annotations-per-task 2]
                                     [--baseline-tasks 2000] [--database sqlite|postgres|both] [--repeat 1]

A Label Studio JSON export of N annotated tasks (4–6 candidates each, the
annotations in the shapes Label Studio writes) is generated, then synced into a
fresh database twice: the first sync, and a re-sync with nothing new. The fast
path is `preflab ls import` (the file streamed a task at a time, a transaction
per 500 tasks, bulk inserts; a task stored before is recognised by the hash of
its text and skipped undecoded). The baseline is what one writes
first: `json.load` of the whole file and an ORM object per row with a SELECT per
prompt, candidate, annotator and annotation; it runs on the first
--baseline-tasks tasks of the same file (it is slow) and rates are compared per
second. Each path runs in a fresh process; peak RSS is that process's high-water
mark. With `--database both` the fast path runs on each database in turn
(`--repeat` times, alternating, on the same file) and Postgres's first-sync rate
is printed as a share of SQLite's, each run's and the median.
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
import uuid
from pathlib import Path

from common import peak_rss_mb, postgres_schema_url
from sentences import sentence


def write_export(path: Path, n_tasks: int, per_task: int, seed: int = 0) -> None:
    """A Label Studio JSON export (a list of tasks), written a task at a time."""
    rng = random.Random(seed)
    buckets = ["tier_1", "tier_2", "tier_3", "tier_4"]
    annotation_id = 0
    with path.open("w", encoding="utf-8") as out:
        out.write("[")
        for t in range(n_tasks):
            k = rng.randint(4, 6)
            items = [
                {
                    "id": f"c{t * 10 + j}",
                    "title": f"Response {j + 1}",
                    "body": f"[{t}.{j}] " + sentence(rng, rng.randint(20, 60)),
                }
                for j in range(k)
            ]
            annotations = []
            for a in range(per_task):
                annotation_id += 1
                ids = [i["id"] for i in items]
                rng.shuffle(ids)
                if rng.random() < 0.2:  # tiers with ties, one unranked
                    value = {b: [] for b in buckets}
                    value["tier_1"], value["tier_2"], value["_"] = ids[:2], ids[2:-1], ids[-1:]
                else:
                    value = {"rank": ids}
                annotations.append(
                    {
                        "id": annotation_id,
                        "completed_by": 1 + a,
                        "was_cancelled": rng.random() < 0.03,
                        "result": [
                            {
                                "value": {"ranker": value},
                                "id": uuid.UUID(int=rng.getrandbits(128)).hex[:10],
                                "from_name": "rank",
                                "to_name": "responses",
                                "type": "ranker",
                                "origin": "manual",
                            }
                        ],
                        "ground_truth": False,
                        "created_at": "2026-01-02T03:04:05.000000Z",
                        "updated_at": "2026-01-02T03:04:05.000000Z",
                        "lead_time": round(rng.uniform(5, 90), 2),
                        "prediction": {},
                        "result_count": 1,
                        "task": t + 1,
                        "project": 1,
                        "updated_by": 1 + a,
                        "parent_prediction": None,
                        "parent_annotation": None,
                        "last_action": None,
                    }
                )
            task = {
                "id": t + 1,
                "annotations": annotations,
                "drafts": [],
                "predictions": [],
                "data": {"prompt": f"Prompt {t}: " + sentence(rng, rng.randint(8, 20)), "items": items},
                "meta": {},
                "created_at": "2026-01-01T00:00:00.000000Z",
                "inner_id": t + 1,
                "project": 1,
            }
            out.write(("," if t else "") + json.dumps(task))
        out.write("]")


def fast_path(url: str, path: Path) -> dict:
    from preflab.db.engine import open_database, session_factory
    from preflab.labelling.studio.export_file import import_export

    sessions = session_factory(open_database(url))
    out = {}
    for run in ("first", "again"):
        t = time.perf_counter()
        _, summary = import_export(
            sessions, path, base_url="http://bench", project_id=1, buckets=["tier_1", "tier_2", "tier_3", "tier_4"]
        )
        out[run] = {
            "seconds": time.perf_counter() - t,
            "tasks": summary.tasks,
            "new": summary.new,
            "unchanged": summary.unchanged,
            "peak_rss_mb": peak_rss_mb(),
        }
    return out


def baseline(url: str, path: Path, limit: int) -> dict:
    """json.load of the whole file, then an ORM object per row and a SELECT per lookup."""
    from sqlalchemy import select

    from preflab.db.engine import open_database, session_factory
    from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RankingItem, RawRecord
    from preflab.db.store import content_hash, new_pseudonym, payload_hash

    sessions = session_factory(open_database(url))
    out = {}
    for run in ("first", "again"):
        t = time.perf_counter()
        with path.open(encoding="utf-8") as handle:
            tasks = json.load(handle)[:limit]
        new = 0
        with sessions.begin() as s:
            for task in tasks:
                data = task["data"]
                for ann in task["annotations"]:
                    text = json.dumps({"task": task["id"], "data": data, "annotation": ann}, sort_keys=True)
                    h = payload_hash(text)
                    if (
                        s.scalar(
                            select(RawRecord.id).where(RawRecord.source == "baseline", RawRecord.payload_hash == h)
                        )
                        is not None
                    ):
                        continue
                    raw = RawRecord(source="baseline", payload=text, payload_hash=h)
                    s.add(raw)
                    s.flush()
                    ph = content_hash(data["prompt"])
                    prompt = s.scalar(select(Prompt).where(Prompt.content_hash == ph))
                    if prompt is None:
                        prompt = Prompt(text=data["prompt"], content_hash=ph)
                        s.add(prompt)
                        s.flush()
                    cids = {}
                    for it in data["items"]:
                        ch = content_hash(it["body"])
                        cand = s.scalar(
                            select(Candidate).where(Candidate.prompt_id == prompt.id, Candidate.content_hash == ch)
                        )
                        if cand is None:
                            cand = Candidate(prompt_id=prompt.id, text=it["body"], content_hash=ch)
                            s.add(cand)
                            s.flush()
                        cids[it["id"]] = cand.id
                    name = f"label-studio-user-{ann['completed_by']}"
                    who = s.scalar(select(Annotator).where(Annotator.kind == "human", Annotator.name == name))
                    if who is None:
                        who = Annotator(kind="human", name=name, pseudonym=new_pseudonym("human"))
                        s.add(who)
                        s.flush()
                    value = ann["result"][0]["value"]["ranker"]
                    tiers = (
                        [[i] for i in value["rank"]]
                        if "rank" in value
                        else [value[b] for b in ("tier_1", "tier_2", "tier_3", "tier_4") if value[b]]
                    )
                    ranking = Ranking(
                        prompt_id=prompt.id,
                        annotator_id=who.id,
                        source="baseline",
                        external_id=str(ann["id"]),
                        ls_annotation_id=ann["id"],
                        ls_task_id=task["id"],
                        status="skipped" if ann["was_cancelled"] else "valid",
                        n_tiers=0 if ann["was_cancelled"] else len(tiers),
                        raw_record_id=raw.id,
                    )
                    s.add(ranking)
                    s.flush()
                    tier_of = {} if ann["was_cancelled"] else {i: n for n, tier in enumerate(tiers) for i in tier}
                    for pos, it in enumerate(data["items"]):
                        s.add(
                            RankingItem(
                                ranking_id=ranking.id,
                                candidate_id=cids[it["id"]],
                                tier=tier_of.get(it["id"]),
                                shown_position=pos,
                            )
                        )
                    new += 1
        out[run] = {"seconds": time.perf_counter() - t, "tasks": len(tasks), "new": new, "peak_rss_mb": peak_rss_mb()}
        del tasks
    return out


def run_child(database: str, kind: str, path: Path, limit: int, work: Path) -> dict:
    drop = None
    if database == "sqlite":
        url = f"sqlite:///{work / f'{kind}.db'}"
    else:
        url, drop = postgres_schema_url()
    try:
        return fast_path(url, path) if kind == "fast" else baseline(url, path, limit)
    finally:
        from preflab.db.engine import dispose_all

        dispose_all()
        if drop:
            drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--annotations-per-task", type=int, default=2)
    parser.add_argument("--baseline-tasks", type=int, default=2_000)
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--repeat", type=int, default=1, help="fast-path runs per database (with both), alternating")
    parser.add_argument("--child", nargs=3, metavar=("DATABASE", "KIND", "WORKDIR"), help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        database, kind, work = args.child
        print(json.dumps(run_child(database, kind, Path(args.input), args.baseline_tasks, Path(work))))
        return

    with tempfile.TemporaryDirectory(prefix="preflab-bench-ls-") as tmp:
        tmp = Path(tmp)
        path = tmp / "export.json"
        t = time.perf_counter()
        write_export(path, args.tasks, args.annotations_per_task)
        print(
            f"generated an export of {args.tasks:,} tasks × {args.annotations_per_task} annotations "
            f"({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s"
        )
        databases = ["sqlite", "postgres"] if args.database == "both" else [args.database]
        runs = {database: {"fast": [], "baseline": []} for database in databases}
        for kind in ("fast", "baseline"):
            for _ in range(args.repeat if kind == "fast" else 1):
                for database in databases:  # alternating, so a change of load hits both
                    runs[database][kind].append(child(database, kind, tmp, path, args.baseline_tasks))
        for database in databases:
            report(database, {kind: found[0] for kind, found in runs[database].items()})
        if len(databases) > 1:
            shares = [
                sq["first"]["seconds"] / pg["first"]["seconds"]  # same tasks: the ratio of the rates
                for sq, pg in zip(runs["sqlite"]["fast"], runs["postgres"]["fast"])
            ]
            print(
                f"\npostgres first-sync rate / sqlite's: {statistics.median(shares):.2f}x "
                f"(runs: {', '.join(f'{x:.2f}' for x in shares)}); load average now {os.getloadavg()[0]:.1f}"
            )
        print(json.dumps(runs))


def child(database: str, kind: str, tmp: Path, path: Path, limit: int) -> dict:
    """One run of `kind` (fast or baseline) on `database`, in a fresh process."""
    work = Path(tempfile.mkdtemp(prefix=f"{database}-{kind}-", dir=tmp))
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
            "--baseline-tasks",
            str(limit),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.exit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(database: str, runs: dict) -> None:
    fast, base = runs["fast"], runs["baseline"]
    rate = fast["first"]["tasks"] / fast["first"]["seconds"]
    base_rate = base["first"]["tasks"] / base["first"]["seconds"]
    again_rate = fast["again"]["tasks"] / fast["again"]["seconds"]
    base_again_rate = base["again"]["tasks"] / base["again"]["seconds"]
    print(f"\n== {database} ==")
    print(
        f"first sync : {fast['first']['tasks']:,} tasks ({fast['first']['new']:,} rankings) in "
        f"{fast['first']['seconds']:.1f} s = {rate:,.0f} tasks/s (baseline {base_rate:,.0f} tasks/s on "
        f"{base['first']['tasks']:,}; {rate / base_rate:.1f}x); peak RSS {fast['first']['peak_rss_mb']:.0f} MB "
        f"(baseline {base['first']['peak_rss_mb']:.0f} MB)"
    )
    print(
        f"re-sync    : nothing new ({fast['again']['unchanged']:,} unchanged) in {fast['again']['seconds']:.1f} s"
        f" = {again_rate:,.0f} tasks/s, {fast['again']['seconds'] / fast['first']['seconds']:.3f} of the first "
        f"sync (baseline {base_again_rate:,.0f} tasks/s, {base['again']['seconds'] / base['first']['seconds']:.3f}"
        f" of its first; {again_rate / base_again_rate:.1f}x); peak RSS {fast['again']['peak_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
