"""`preflab serve` under webhook load: 20 clients, 2,000 deliveries, 10% of them replays, on loopback.

Usage: python bench/bench_serve.py [--deliveries 2000] [--clients 20] [--duplicates 0.1]
                                   [--database sqlite|postgres|both] [--rate 0] [--seed 0]

The store is set up directly, as `ls push` leaves it (no Label Studio): a project of
520 tasks of 4 replies, recorded as pushed, and one annotation by each annotator already
stored (so the server never asks Label Studio for their emails; it is pointed at a
loopback port where nothing listens). Then `preflab serve` runs as a real process and
each client, an annotator, posts the bodies Label Studio 1.23 would send for their work
(the shape `webhooks/serializers_for_hooks.py` gives, the project's invite token
included): ANNOTATION_CREATED for an annotation, ANNOTATION_UPDATED for an edit of one
they made before, and replays of a delivery they sent before, each client one request
at a time on its own kept-alive connection, as Label Studio sends one per submit: as
fast as the answers come (the default: the load the issue names, which measures the
throughput, and the latency of a saturated server), or `--rate` deliveries a second
in all (the latency below saturation). Each request's latency is measured at the
client, a minimal HTTP/1.1 one (httpx spent more CPU a request than the bare app, and
made the baseline measure the client).

Checked after the delivery worker drained: every delivery got 200; the store holds one
raw record per distinct body, all parsed; one ranking per annotation version (created:
version 1, edited: 1 superseded and 2 valid), nothing lost or doubled.

The baseline, in the same run and with the same clients and bodies: a bare FastAPI app
under uvicorn that reads the body and answers 200 without storing anything (the HTTP
floor on this machine). Printed: p50, p99, max and throughput for each, the ratios,
the time the worker took to parse everything, and the load average before and after.
The servers' logs stay in the printed work folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

from common import postgres_schema_url
from ls_webhook_body import PROJECT, TASKS, label_studio_body
from webhook_load import SECRET, Event, latency_stats, run_bare, send_deliveries, start_server, stop_server
from worlds import free_port

REPLIES = 4


def setup_store(url: str, label_studio: str, users: list[int]) -> tuple[list[dict], int]:
    """A project of TASKS pushed tasks, and one stored annotation per user; returns (tasks, stored rankings)."""
    from preflab.db.conversation import (
        assistant_turn,
        prompt_columns,
        prompt_hash,
        reply_columns,
        reply_hash,
        user_turn,
    )
    from preflab.db.engine import dispose_all, open_sessions
    from preflab.db.store import ensure_candidates, ensure_prompts
    from preflab.labelling.studio.projects import ensure_project
    from preflab.labelling.studio.push import _record, plan_tasks
    from preflab.labelling.studio.webhook_apply import apply_pending
    from preflab.labelling.studio.webhooks import receive
    from preflab.templates import label_config

    rng = random.Random(1)
    words = [
        "the",
        "model",
        "answer",
        "reward",
        "policy",
        "token",
        "river",
        "mountain",
        "data",
        "train",
        "human",
        "judge",
        "rank",
        "better",
    ]
    prompts = {
        f"Question {n}: " + " ".join(rng.choices(words, k=12)) + "?": [
            f"Reply {r} to {n}: " + " ".join(rng.choices(words, k=40)) for r in range(REPLIES)
        ]
        for n in range(TASKS)
    }
    sessions = open_sessions(url)
    with sessions.begin() as session:
        pids = ensure_prompts(session, {prompt_hash(user_turn(p)): prompt_columns(user_turn(p)) for p in prompts})
        ensure_candidates(
            session,
            {
                (pids[prompt_hash(user_turn(p))], reply_hash(assistant_turn(r))): reply_columns(assistant_turn(r))
                for p, rs in prompts.items()
                for r in rs
            },
        )
        project = ensure_project(
            session,
            label_studio,
            PROJECT,
            title="bench serve",
            template="ranking",
            label_config=label_config("ranking"),
        )
        planned, _ = plan_tasks(session, project)
        rows = [(1000 + n, t.prompt_id, t.set_hash, t.order) for n, t in enumerate(planned)]
        _record(session, project, rows)
    tasks = [{"id": tid, "data": t.data} for (tid, *_), t in zip(rows, planned)]
    # Each annotator has ranked before (on a task of their own), as in a project under way.
    config = label_config("ranking")
    with sessions.begin() as session:
        for n, user in enumerate(users):
            task = tasks[-1 - n]
            receive(
                session,
                label_studio_body(
                    "ANNOTATION_CREATED", 900_000 + n, user, task, [i["id"] for i in task["data"]["items"]], 1, config
                ),
            )
        apply_pending(session, label_studio, lambda: {u: f"annotator{u}@bench.test" for u in users}, limit=len(users))
    dispose_all()
    return tasks[: -len(users)], len(users)


def plan_events(tasks: list[dict], users: list[int], n: int, duplicates: float, seed: int) -> list[list[Event]]:
    """Each client's deliveries in order: its annotations created, some edited later, some sent again."""
    from preflab.templates import label_config

    config = label_config("ranking")
    rng = random.Random(seed)
    replays = round(n * duplicates)
    distinct = n - replays
    edits = distinct // 6
    creations = distinct - edits
    clients: list[list[Event]] = [[] for _ in users]
    orders: dict[int, list[str]] = {}
    for a in range(1, creations + 1):
        task = tasks[(a - 1) // 3 % len(tasks)]
        ids = [i["id"] for i in task["data"]["items"]]
        rng.shuffle(ids)
        orders[a] = ids
        c = a % len(users)
        clients[c].append(Event(a, 1, label_studio_body("ANNOTATION_CREATED", a, users[c], task, ids, 1, config)))
    edited = rng.sample(range(1, creations + 1), edits)
    for a in edited:
        own = clients[a % len(users)]
        at = next(i for i, e in enumerate(own) if e.annotation == a)
        task = tasks[(a - 1) // 3 % len(tasks)]
        first = orders[a]
        ids = first[1:] + first[:1]  # a different order than the one it replaces, or it is no edit
        own.insert(
            rng.randint(at + 1, len(own)),
            Event(a, 2, label_studio_body("ANNOTATION_UPDATED", a, users[a % len(users)], task, ids, 2, config)),
        )
    for _ in range(replays):
        own = clients[rng.randrange(len(clients))]
        at = rng.randint(1, len(own))
        original = own[rng.randrange(at)]
        own.insert(at, Event(original.annotation, original.version, original.body, replay=True))
    return clients


def check_store(url: str, clients: list[list[Event]], warm: int) -> dict:
    """What the store holds after the worker drained, against what was sent: raises if anything is lost or doubled."""
    from sqlalchemy import func, select

    from preflab.db.engine import dispose_all, open_sessions
    from preflab.db.models import Ranking, RawRecord
    from preflab.labelling.studio.versions import SOURCE
    from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE

    events = [e for own in clients for e in own]
    distinct = {e.body for e in events}
    sent = {}
    for e in events:
        sent[e.annotation] = max(sent.get(e.annotation, 0), e.version)
    sessions = open_sessions(url)
    with sessions() as s:
        raw = dict(
            s.execute(
                select(RawRecord.status, func.count())
                .where(RawRecord.source == WEBHOOK_SOURCE)
                .group_by(RawRecord.status)
            ).all()
        )
        rows = s.execute(
            select(Ranking.ls_annotation_id, Ranking.version, Ranking.status).where(
                Ranking.source == SOURCE, Ranking.ls_annotation_id < 900_000
            )
        ).all()
        total = s.scalar(select(func.count()).select_from(Ranking).where(Ranking.source == SOURCE))
    dispose_all()
    versions = sorted((a, v) for a, v, _ in rows)
    expected = sorted((a, v) for a, top in sent.items() for v in range(1, top + 1))
    status = {(a, v): st for a, v, st in rows}
    wrong = [(a, v) for a, v in expected if status.get((a, v)) != ("valid" if v == sent[a] else "superseded")]
    result = {
        "raw_records": raw,
        "distinct_bodies": len(distinct) + warm,
        "rankings": len(rows),
        "expected_rankings": len(expected),
        "lost": len(set(expected) - set(versions)),
        "doubled": len(versions) - len(set(versions)),
        "wrong_status": len(wrong),
        "all_rankings": total,
    }
    ok = raw == {"ok": len(distinct) + warm} and versions == expected and not wrong and total == len(rows) + warm
    if not ok:
        raise SystemExit(f"the store is not exact: {json.dumps(result)}")
    return result


def run_serve(
    url: str, clients: list[list[Event]], warm: int, label_studio: str, workdir: Path, name: str, rate: float
) -> dict:
    from sqlalchemy import func, select

    from preflab.db.engine import dispose_all, open_sessions
    from preflab.db.models import RawRecord
    from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE

    port = free_port()
    env = {
        **os.environ,
        "PREFLAB_WEBHOOK_SECRET": SECRET,
        "LABEL_STUDIO_URL": label_studio,
        "LABEL_STUDIO_API_KEY": "bench-no-label-studio",
        "PREFLAB_HOME": str(workdir / "home"),
    }
    proc = start_server(
        [sys.executable, "-m", "preflab", "--database-url", url, "serve", "--port", str(port), "--sync-every", "off"],
        env,
        workdir / f"serve-{name}.log",
        port,
    )
    try:
        latencies, statuses, wall = asyncio.run(send_deliveries(port, clients, rate))
        sent_at = time.perf_counter()
        sessions = open_sessions(url)
        pending = -1
        while time.perf_counter() - sent_at < 120:
            with sessions() as s:
                pending = s.scalar(
                    select(func.count())
                    .select_from(RawRecord)
                    .where(RawRecord.source == WEBHOOK_SOURCE, RawRecord.status == "pending")
                )
            if not pending:
                break
            time.sleep(0.1)
        drained = time.perf_counter() - sent_at
        dispose_all()
    finally:
        stop_server(proc)
    if set(statuses) != {200}:
        log = (workdir / f"serve-{name}.log").read_text()[-3000:]
        raise SystemExit(f"{name}: statuses {sorted(set(statuses))}:\n{log}")
    if pending:
        raise SystemExit(f"{name}: {pending} deliveries still pending after 120 s")
    return {
        **latency_stats(latencies, wall),
        "drained_after_s": round(drained, 2),
        "parse_per_s": round(sum(map(len, clients)) / (wall + drained), 1),
        "store": check_store(url, clients, warm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duplicates", type=float, default=0.1)
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="deliveries a second, all clients together (default 0: each client as fast as it can)",
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    nobody = socket.socket()  # bound, never listening: Label Studio is "down" for the server's own sync
    nobody.bind(("127.0.0.1", 0))
    label_studio = f"http://127.0.0.1:{nobody.getsockname()[1]}"
    users = [100 + c for c in range(args.clients)]
    report = {
        "workdir": str(workdir),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "deliveries": args.deliveries,
        "clients": args.clients,
        "duplicates": args.duplicates,
        "rate": args.rate or "as fast as answers come",
    }
    began = time.perf_counter()
    databases = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    clients = None
    for name in databases:
        if name == "sqlite":
            url, drop = f"sqlite:///{workdir / 'serve.db'}", (lambda: None)
        else:
            url, drop = postgres_schema_url()
        try:
            tasks, warm = setup_store(url, label_studio, users)
            if clients is None:
                clients = plan_events(tasks, users, args.deliveries, args.duplicates, args.seed)
                report["replays"] = sum(e.replay for own in clients for e in own)
                report["edits"] = sum(e.version == 2 and not e.replay for own in clients for e in own)
            report[name] = run_serve(url, clients, warm, label_studio, workdir, name, args.rate)
        finally:
            drop()
    report["bare_fastapi"] = run_bare(clients, workdir, args.rate)
    for name in databases:
        report[name]["vs_bare"] = {
            k: round(report[name][k] / report["bare_fastapi"][k], 2) for k in ("p50_ms", "p99_ms", "per_s")
        }
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    report["seconds"] = round(time.perf_counter() - began, 1)
    nobody.close()
    print(json.dumps(report, indent=2))
    for name in [*databases, "bare_fastapi"]:
        r = report[name]
        extra = (
            f", parsed {r['parse_per_s']:,}/s end to end, drained {r['drained_after_s']} s after the last answer; "
            f"p99 {r['vs_bare']['p99_ms']}x bare"
            if name != "bare_fastapi"
            else ""
        )
        print(
            f"{name}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms, "
            f"{r['per_s']:,} requests/s{extra}"
        )
    goal = report.get("sqlite", {}).get("p99_ms")
    if goal is not None:
        print(f"goal p99 <= 100 ms on SQLite: {'met' if goal <= 100 else 'NOT met'} ({goal} ms)")


if __name__ == "__main__":
    main()
