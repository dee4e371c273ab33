"""Applying stored Label Studio webhook deliveries: parsed as `ls sync` parses annotations.

The bodies are built in the exact shape Label Studio 1.23.2 posts (`webhook_bodies`), so
these tests need no server; the last one takes real deliveries from the shared Label
Studio and compares the store with what `ls sync` makes of the same annotations.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import httpx
import pytest
from sqlalchemy import text

from preflab.db.engine import open_sessions
from preflab.db.store import raw_record
from preflab.labelling.studio.versions import SOURCE
from preflab.labelling.studio.webhook_apply import apply_pending
from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE, last_delivery_at, pending_count
from tests.labelling.ls_helpers import item, ranker_result, rankings, unique, write_prompts
from tests.labelling.studio.webhook_bodies import (
    BASE,
    INVITE,
    STORAGE_PASSWORD,
    T2,
    T3,
    T4,
    Users,
    annotation,
    apply,
    body,
    created,
    deleted,
    deliver,
    known_project,
    project,
    raw,
    task,
    texts,
    updated,
)


def test_created_skipped_bulk_created_updated_and_deleted(sessions, db_url):
    known_project(sessions)
    t1, t2 = task(101), task(102)
    bodies = [
        created(annotation(1, 101, ("c2", "c1", "c3")), t1),
        created(annotation(2, 102, cancelled=True), t2),
        # "Predictions to annotations": lists of annotations and of their tasks.
        body(
            "ANNOTATIONS_CREATED",
            annotation=[annotation(3, 101, ("c3", "c2", "c1"), user=2), annotation(4, 102, ("c1", "c3", "c2"), user=2)],
            task=[t1, t2],
            project=project(),
        ),
        updated(annotation(1, 101, ("c1", "c2", "c3"), when=T2), t1),
        deleted(1, 999),  # 999: never stored, nothing to mark
    ]
    got = deliver(sessions, *bodies)
    assert [(d.error, d.new) for d in got] == [(None, True)] * 5
    with sessions() as session:
        assert pending_count(session) == 5
        assert abs(last_delivery_at(session) - datetime.now(timezone.utc)) < timedelta(minutes=1)

    users = Users()
    summary = apply(sessions, users)
    assert (
        summary.deliveries,
        summary.annotations,
        summary.new,
        summary.updated,
        summary.skipped,
        summary.deleted,
        summary.quarantined,
    ) == (5, 5, 4, 1, 1, 1, 0)
    assert users.calls == 1
    q = lambda n, t: f"reply {n} to question {t}"  # noqa: E731
    assert texts(sessions, db_url) == {
        1: [
            ("superseded", 1, "ada@preflab.test", [[q(2, 101)], [q(1, 101)], [q(3, 101)]]),
            ("deleted", 2, "ada@preflab.test", [[q(1, 101)], [q(2, 101)], [q(3, 101)]]),
        ],
        2: [("skipped", 1, "ada@preflab.test", [])],
        3: [("valid", 1, "bo@preflab.test", [[q(3, 101)], [q(2, 101)], [q(1, 101)]])],
        4: [("valid", 1, "bo@preflab.test", [[q(1, 102)], [q(3, 102)], [q(2, 102)]])],
    }
    stored = raw(sessions, WEBHOOK_SOURCE)
    assert [r.status for r in stored] == ["ok"] * 5
    # The project's invite token and storage password are never stored; the hash is of the bytes received.
    assert not any(INVITE in r.payload or STORAGE_PASSWORD in r.payload for r in stored)
    assert json.loads(stored[0].payload)["annotation"] == annotation(1, 101, ("c2", "c1", "c3"))
    with sessions() as session:
        assert pending_count(session) == 0
    assert apply(sessions).deliveries == 0


def test_replays_and_late_deliveries_add_nothing(sessions, db_url):
    known_project(sessions)
    t1 = task(101)
    first = created(annotation(1, 101), t1)
    (one,) = deliver(sessions, first)
    users = Users()
    assert apply(sessions, users).new == 1

    (again,) = deliver(sessions, first)  # the same bytes: the same record, nothing to do
    assert (again.raw_id, again.error, again.new) == (one.raw_id, None, False)
    # The same version sent again in other bytes (a proxy re-encoded it): a new delivery, no new ranking,
    # and no new raw record of the annotation (it is known by its version, not re-read).
    annotations_before = len(raw(sessions, SOURCE))
    deliver(sessions, json.dumps(json.loads(first), separators=(",", ":")).encode())
    summary = apply(sessions, users)
    assert (summary.deliveries, summary.unchanged, summary.new, summary.updated) == (1, 1, 0, 0)
    assert len(raw(sessions, SOURCE)) == annotations_before

    # An edit, then an older edit that arrives late: the older one changes nothing.
    deliver(
        sessions,
        updated(annotation(1, 101, ("c1", "c2", "c3"), when=T3), t1),
        updated(annotation(1, 101, ("c3", "c2", "c1"), when=T2), t1),
    )
    summary = apply(sessions, users)
    assert (summary.updated, summary.unchanged) == (1, 1)
    # Deleted, then an edit applied only after it (its delivery waited while `ls sync` found the
    # annotation gone): a deleted annotation does not come back, however new the edit says it is.
    deliver(sessions, deleted(1), updated(annotation(1, 101, ("c2", "c3", "c1"), when=T4), t1))
    summary = apply(sessions, users)
    assert (summary.deleted, summary.unchanged, summary.new, summary.updated) == (1, 1, 0, 0)
    assert [(s, v) for s, v, _, _ in texts(sessions, db_url)[1]] == [("superseded", 1), ("deleted", 2)]
    assert users.calls == 1  # the annotator was named once; later deliveries found the person
    assert {r.status for r in raw(sessions, WEBHOOK_SOURCE)} == {"ok"}


def test_unknown_projects_and_unusable_tasks_are_quarantined(sessions, db_url):
    known_project(sessions)
    no_items = task(103, data={"prompt": "question 103?"})
    got = deliver(
        sessions,
        created(annotation(1, 101, project=99), task(101, project=99), pid=99),
        created(annotation(2, 103), no_items),
        body(
            "ANNOTATIONS_CREATED",
            annotation=[annotation(3, 101), annotation(4, 103)],
            task=[task(101), no_items],
            project=project(),
        ),
        body("ANNOTATIONS_DELETED"),  # Label Studio deleted nothing: the action alone
        body("ANNOTATIONS_DELETED", annotations=[{"id": "5\x00"}], project=project()),
        created(annotation(6, 104), task(105)),  # the annotation's task is not the one sent
    )
    summary = apply(sessions)
    assert (summary.deliveries, summary.quarantined, summary.new) == (6, 5, 1)
    with sessions() as session:
        status = {d.raw_id: raw_record(session, d.raw_id) for d in got}
    reasons = [status[d.raw_id]["reason"] for d in got]
    no_list = "task data 'items' is not a list of at least two items"
    assert reasons == [
        f"preflab knows no Label Studio project 99 at {BASE} (`preflab ls sync --project 99` records it)",
        no_list,
        f"1 of its 2 annotations cannot be used: {no_list}",
        None,
        "deleted annotation id '5\\x00' is not a Label Studio id",
        "annotation 6 is on task 104, which the delivery does not hold",
    ]
    assert status[got[3].raw_id]["status"] == "ok"
    assert sorted(texts(sessions, db_url)) == [3]  # the one usable annotation
    # The annotations that cannot be used are quarantined as `ls sync` quarantines them, task data and all.
    quarantined = [r for r in raw(sessions, SOURCE) if r.status == "quarantined"]
    assert [r.reason for r in quarantined] == [no_list, no_list]


@pytest.mark.postgres
def test_two_servers_never_apply_the_same_delivery_at_once(postgres_url):
    first, second = open_sessions(postgres_url), open_sessions(postgres_url)
    known_project(first)
    deliver(first, created(annotation(1, 101), task(101)))
    with first.begin() as one:
        assert apply_pending(one, BASE, Users()).new == 1
        with second.begin() as other:  # while the first has not committed: it skips what the first holds
            other.execute(text("SET LOCAL lock_timeout = '5s'"))  # were it to wait instead, fail, not hang
            assert apply_pending(other, BASE, Users()).deliveries == 0
    assert apply(second).deliveries == 0
    assert [r["status"] for r in rankings(postgres_url)] == ["valid"]


class _Capture(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self):
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_real_deliveries_agree_with_ls_sync(lcli, sqlite_url, ls_env, tmp_path):
    """Deliveries from a real Label Studio: the store ends as `ls sync` alone makes it, nothing doubled."""
    from preflab.labelling.studio.client import LabelStudioClient
    from tests.labelling.ls_fixtures import make_cli
    from tests.labelling.ls_helpers import tasks

    server = ls_env
    prompt = unique("Name a prime number.")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique(f"prime {i}") for i in range(3)]}))
    pid = json.loads(lcli("ls", "init", "--title", unique("webhooks"), "--json").stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (pushed,) = tasks(sqlite_url)
    x, y, z = map(item, pushed["shown"])

    capture = HTTPServer(("127.0.0.1", 0), type("Capture", (_Capture,), {"bodies": []}))
    threading.Thread(target=capture.serve_forever, daemon=True).start()
    web = httpx.Client(base_url=server.url, headers={"Authorization": f"Token {server.token}"}, timeout=60)
    try:
        hook = web.post(
            "/api/webhooks/",
            json={
                "url": f"http://127.0.0.1:{capture.server_port}/webhook",
                "project": pid,
                "send_payload": True,
                "send_for_all_actions": False,
                "actions": ["ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED"],
            },
        )
        assert hook.status_code == 201, hook.text
        user = server.signup(f"gil-{pid}@preflab.test")
        sdk = server.sdk()
        first = sdk.annotations.create(pushed["id"], completed_by=user, result=ranker_result({"rank": [z, x, y]}))
        lcli("ls", "sync", "--project", pid)  # `ls sync` reads the first annotation before its delivery is applied
        sdk.annotations.update(first.id, result=ranker_result({"rank": [x, z, y]}))
        sdk.annotations.create(pushed["id"], completed_by=user, result=[], was_cancelled=True)
        doomed = sdk.annotations.create(pushed["id"], completed_by=user, result=ranker_result({"rank": [y, x, z]}))
        sdk.annotations.delete(doomed.id)
        web.delete(f"/api/webhooks/{hook.json()['id']}/")
    finally:
        capture.shutdown()
        web.close()
    bodies = capture.RequestHandlerClass.bodies
    assert [json.loads(b)["action"] for b in bodies] == [
        "ANNOTATION_CREATED",
        "ANNOTATION_UPDATED",
        "ANNOTATION_CREATED",
        "ANNOTATION_CREATED",
        "ANNOTATIONS_DELETED",
    ]

    sessions = open_sessions(sqlite_url)
    assert all(d.error is None for d in deliver(sessions, *bodies))
    client = LabelStudioClient(server.url, server.token)
    with sessions.begin() as session:
        summary = apply_pending(session, server.url, client.users)
    assert (summary.unchanged, summary.updated, summary.new, summary.skipped, summary.deleted) == (1, 1, 2, 1, 1)
    assert not any(server.token in r.payload for r in raw(sessions, WEBHOOK_SOURCE))
    again = json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)
    assert (again["new"], again["updated"], again["deleted"], again["quarantined"]) == (0, 0, 0, 0)

    # The same annotations read by `ls sync` alone, into a fresh store.
    alone = str(tmp_path / "alone.db")
    make_cli(f"sqlite:///{alone}")("ls", "sync", "--project", pid)
    by_hooks, by_sync = texts(sessions, sqlite_url), texts(open_sessions(f"sqlite:///{alone}"), f"sqlite:///{alone}")
    newest = {a: v[-1] for a, v in by_hooks.items() if v[-1][0] != "deleted"}
    assert {a: (s, who, tiers) for a, (s, _, who, tiers) in newest.items()} == {
        a: (s, who, tiers) for a, (s, _, who, tiers) in ((a, v[-1]) for a, v in by_sync.items())
    }
    assert by_hooks[doomed.id][-1][0] == "deleted" and doomed.id not in by_sync
