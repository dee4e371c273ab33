"""Receiving Label Studio webhook deliveries: each stored as received, before it is parsed.

A body that cannot be read is quarantined with the reason, and kept as it came; a
delivery stored and not parsed is parsed later. The bodies are built as Label
Studio 1.23.2 posts them (`webhook_bodies`), so these tests need no server.
"""

from __future__ import annotations

import json

from sqlalchemy import event, func, select

from preflab.db.engine import dispose_all, open_sessions
from preflab.db.models import Ranking
from preflab.db.store import raw_record
from preflab.labelling.studio.webhooks import last_delivery_at, pending_count
from tests.labelling.ls_helpers import rankings
from tests.labelling.studio.webhook_bodies import (
    INVITE,
    annotation,
    apply,
    body,
    created,
    deliver,
    known_project,
    project,
    task,
)


def test_bodies_that_cannot_be_read_are_quarantined_with_the_reason(sessions, db_url):
    known_project(sessions)
    head = b'{"action": "ANNOTATION_CREATED", "annotation": {"id": '
    refused = {
        head + b'1, "task": 101': "the body is not JSON (unexpected end of data",
        b"[1, 2]": "the body is a JSON list, not an object",
        b'{"annotation": {"id": 1}}': "the body names no action, not one of ANNOTATIONS_CREATED",
        body("PROJECT_UPDATED", project=project()): "the body names action 'PROJECT_UPDATED', not one of",
        b'"\xff\xfe"': "the body is not JSON (str is not valid UTF-8",
        # A NUL byte in an id, raw: no JSON can hold it, outside a string or in one.
        head + b'1\x00, "task": 101}}': "the body is not JSON (unexpected character",
        head + b'"1\x00", "task": 101}}': "the body is not JSON (unexpected control character in string",
        b'{"action": "ANNOTATION_CREATED\\u0000"}': "the body names action 'ANNOTATION_CREATED\\x00', not one of",
    }
    got = deliver(sessions, *refused)
    for (sent, reason), delivery in zip(refused.items(), got):
        assert delivery.new and delivery.error.startswith(reason), (sent, delivery.error)
        with sessions() as session:
            record = raw_record(session, delivery.raw_id)
        assert (record["status"], record["reason"]) == ("quarantined", delivery.error)
        if INVITE.encode() not in sent:
            assert record["payload"] == sent  # kept exactly as received, NUL bytes and all
    with sessions() as session:
        stored = raw_record(session, got[3].raw_id)["payload"].decode()
    assert INVITE not in stored and json.loads(stored)["project"]["token"] == "[not stored]"
    (replay,) = deliver(sessions, head + b'1\x00, "task": 101}}')  # refused again, stored once
    assert (replay.raw_id, replay.new, replay.error) == (got[5].raw_id, False, got[5].error)

    # A NUL in an id that JSON can carry (escaped): stored pending, then quarantined, never a ranking.
    nul = created(dict(annotation(1, 101), id="1\x002"), task(101))
    assert b"\\u0000" in nul
    (escaped,) = deliver(sessions, nul)
    assert escaped.error is None
    assert apply(sessions).quarantined == 1
    with sessions() as session:
        record = raw_record(session, escaped.raw_id)
        assert record["status"] == "quarantined"
        assert record["reason"] == "annotation id '1\\x002' is not a Label Studio id"
        assert session.scalar(select(func.count()).select_from(Ranking)) == 0
        assert pending_count(session) == 0


def test_a_delivery_stored_but_not_parsed_is_parsed_later(db_url):
    sessions = open_sessions(db_url)
    known_project(sessions)
    deliver(sessions, created(annotation(1, 101), task(101)))
    dispose_all()  # the process that received it is gone

    later = open_sessions(db_url)
    with later() as session:
        assert pending_count(session) == 1
    assert apply(later).new == 1
    assert [r["status"] for r in rankings(db_url)] == ["valid"]


def test_the_pending_deliveries_are_found_through_the_index_partial_to_deliveries(tmp_path):
    """Imports fill raw_records; the server's frequent questions read only the deliveries' own index."""
    sessions = open_sessions(f"sqlite:///{tmp_path / 'plan.db'}")
    seen: list[str] = []
    with sessions() as session:
        connection = session.connection()

        def explain(conn, cursor, statement, parameters, context, executemany):
            if statement.startswith("SELECT") and "raw_records" in statement:
                plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
                seen.append(" ".join(str(row[-1]) for row in plan))

        event.listen(connection, "before_cursor_execute", explain)
        pending_count(session)
        last_delivery_at(session)
        event.remove(connection, "before_cursor_execute", explain)
    assert seen and all("ix_raw_records_deliveries" in plan for plan in seen), seen
