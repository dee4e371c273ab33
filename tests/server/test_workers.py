"""The background workers: deliveries acknowledged at once, parsed right after, and after a restart.

The server talks to the test run's real Label Studio (for the annotators' emails); the
deliveries are built as Label Studio posts them, for a project it does not have, so the
startup `ls sync` leaves them alone.
"""

from __future__ import annotations

import pytest

from tests.labelling.ls_helpers import rankings
from tests.server.conftest import SECRET, raw_records, stored, unknown_to_label_studio, wait_until
from tests.server.deliveries import annotated, deleted, known_project

HEADERS = {"X-Preflab-Secret": SECRET}


@pytest.fixture
def label_studio_url(ls_env) -> str:
    return ls_env.url


def test_a_delivery_is_acknowledged_then_parsed_by_the_worker_edits_and_deletions_too(
    app_client, db_url, label_studio_url, tiny_lm
):
    project = known_project(db_url, label_studio_url, unknown_to_label_studio())
    client = app_client(background=True, model=tiny_lm, sync_every="off")
    answer = client.post("/webhook", content=annotated(project, 1, 1, annotation=11), headers=HEADERS)
    # Stored before it was answered; the answer never waits for parsing (an idle server answers and parses nothing:
    # the next test), so no scheduler's delay can make Label Studio's one-second wait run out on parsing.
    assert answer.status_code == 200 and stored(db_url)["raw"] == 1
    wait_until(lambda: stored(db_url)["ok"] == 1)
    [ranking] = rankings(db_url)
    assert (ranking["annotation"], ranking["status"], ranking["version"]) == (11, "valid", 1)

    edit = annotated(
        project,
        1,
        1,
        annotation=11,
        order=("r0", "r1", "r2"),
        action="ANNOTATION_UPDATED",
        updated_at="2026-01-02T00:00:00Z",
    )
    assert client.post("/webhook", content=edit, headers=HEADERS).status_code == 200
    wait_until(lambda: len(rankings(db_url)) == 2)
    assert [(r["version"], r["status"]) for r in rankings(db_url)] == [(1, "superseded"), (2, "valid")]

    assert client.post("/webhook", content=deleted(project, 11), headers=HEADERS).status_code == 200
    wait_until(lambda: rankings(db_url)[-1]["status"] == "deleted")
    health = client.get("/health").json()
    assert health["deliveries"]["pending"] == 0 and health["deliveries"]["last_delivery_at"]
    assert health["deliveries"]["parser"]["parsed"] == 3 and health["deliveries"]["parser"]["last_error"] is None


def test_deliveries_left_pending_are_parsed_when_the_server_starts(app_client, db_url, label_studio_url, tiny_lm):
    project = known_project(db_url, label_studio_url, unknown_to_label_studio())
    idle = app_client(background=False)  # a server that stored them and died before parsing
    for annotation in (21, 22, 23):
        assert (
            idle.post(
                "/webhook", content=annotated(project, annotation, 1, annotation=annotation), headers=HEADERS
            ).status_code
            == 200
        )
    assert stored(db_url) == {"raw": 3, "pending": 3, "ok": 0, "quarantined": 0, "rankings": 0}

    app_client(background=True, model=tiny_lm, sync_every="off")
    wait_until(lambda: stored(db_url)["pending"] == 0)
    assert stored(db_url) | {"raw": 0} == {"raw": 0, "pending": 0, "ok": 3, "quarantined": 0, "rankings": 3}
    assert sorted(r["annotation"] for r in rankings(db_url) if r["status"] == "valid") == [21, 22, 23]


def test_a_nul_byte_in_an_id_is_stored_as_received_and_never_becomes_a_ranking(
    app_client, db_url, label_studio_url, tiny_lm
):
    from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE

    project = known_project(db_url, label_studio_url, unknown_to_label_studio())
    client = app_client(background=True, model=tiny_lm)
    body = annotated(project, 1, 1, annotation=501).replace(b'"id": 501', b'"id": "50\\u00001"')
    assert b"\\u0000" in body
    answer = client.post("/webhook", content=body, headers=HEADERS)
    assert answer.status_code in (200, 400), answer.text
    [record] = raw_records(db_url)
    assert record.source == WEBHOOK_SOURCE and (record.payload_bytes or record.payload.encode()) == body
    wait_until(lambda: stored(db_url)["pending"] == 0)
    assert stored(db_url) == {"raw": 1, "pending": 0, "ok": 0, "quarantined": 1, "rankings": 0}
    assert "\x00" not in raw_records(db_url)[0].reason


def _group(db_url: str, bodies: list[bytes], *, fail: Exception | None = None, monkeypatch=None) -> tuple:
    """Hand `bodies` to one server's receiver at once (held back until all are queued, so they are one group);
    returns each request's delivery or error, what the store held as each answer came, and the receiver."""
    import asyncio
    import threading

    from preflab.db.engine import open_sessions
    from preflab.labelling.studio import webhooks
    from preflab.server.receiver import Receiver

    if fail is not None:
        real = webhooks.receive_many

        def failing(session, pairs):
            real(session, pairs)  # written, then the transaction fails: it must all roll back
            raise fail

        monkeypatch.setattr(webhooks, "receive_many", failing)
    receiver = Receiver(open_sessions(db_url))
    seen: dict[int, set[int]] = {}

    async def one(n: int, body: bytes):
        delivery = await receiver.receive(body, "127.0.0.1")
        seen[n] = {r.id for r in raw_records(db_url)}  # read at once, in another session: committed?
        return delivery

    async def run():
        with receiver.gate.parser(threading.Event()):  # the receiver waits its turn: everything queues
            tasks = [asyncio.create_task(one(n, body)) for n, body in enumerate(bodies)]
            while receiver.gate._queued < len(bodies):  # handed over (the receiver may hold them, waiting)
                await asyncio.sleep(0.001)
        return await asyncio.gather(*tasks, return_exceptions=True)

    try:
        return asyncio.run(run()), seen, receiver
    finally:
        receiver.stop()


def test_concurrent_deliveries_are_one_transaction_each_acknowledged_after_commit_and_stored_once(db_url):
    from preflab.labelling.studio.webhooks import Delivery
    from tests.server.conftest import delivery

    bodies = [delivery(annotation_id=600 + n) for n in range(30)]
    bodies += [bodies[3], bodies[7], b'{"action": "PROJECT_CREATED"}']  # two replays in the group, one refused
    answers, seen, receiver = _group(db_url, bodies)
    assert all(isinstance(a, Delivery) for a in answers), answers
    assert receiver.groups == 1 and receiver.stored == 33
    for n, answer in enumerate(answers):
        assert answer.raw_id in seen[n]  # committed before its request heard of it
    assert [a.raw_id for a in answers[30:32]] == [answers[3].raw_id, answers[7].raw_id]
    assert [a.new for a in answers] == [True] * 30 + [False, False, True]
    assert answers[32].error and all(a.error is None for a in answers[:32])
    assert stored(db_url) == {"raw": 31, "pending": 30, "ok": 0, "quarantined": 1, "rankings": 0}
    assert len({a.raw_id for a in answers}) == 31


def test_a_failed_group_transaction_fails_every_request_of_the_group_and_stores_none(db_url, monkeypatch):
    from tests.server.conftest import delivery

    bodies = [delivery(annotation_id=700 + n) for n in range(10)]
    answers, _, receiver = _group(db_url, bodies, fail=RuntimeError("the disk is gone"), monkeypatch=monkeypatch)
    assert [str(a) for a in answers] == ["the disk is gone"] * 10
    assert receiver.groups == 0 and stored(db_url)["raw"] == 0
