"""The server's endpoints in-process, on a real store: health, the secret, limits, hostile bodies."""

from __future__ import annotations

import json
import logging

import pytest

from tests.server.conftest import DEFAULT_SERVED, SECRET, basic, delivery, raw_records, stored

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

WEBHOOK_HEADERS = {"X-Preflab-Secret": SECRET, "Content-Type": "application/json"}


def test_health_says_what_an_operator_needs(app_client):
    client = app_client()
    answer = client.get("/health")
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "UP" and body["database"] == "ok"
    # Nothing trained yet: the embedded model's likelihood judge serves, and says so.
    assert body["model_version"] == DEFAULT_SERVED
    assert body["serving"] == (
        "the likelihood judge on smollm2-135m-instruct (the default model: no reward model is trained yet)"
    )
    assert body["predictions"]["budget_s"] == 20 and body["predictions"]["queued"] == 0
    assert body["deliveries"]["pending"] == 0 and body["deliveries"]["last_delivery_at"] is None
    assert body["retrain"]["state"] == "off"
    assert SECRET not in answer.text


def test_setup_answers_the_model_version_and_predict_one_entry_per_task(app_client):
    client = app_client()
    setup = client.post(
        "/setup",
        headers=basic(SECRET),
        json={
            "project": "7.1700000000",
            "schema": "<View/>",
            "hostname": "http://localhost:8080",
            "access_token": "the-users-token",
            "extra_params": None,
        },
    )
    assert setup.status_code == 200 and setup.json() == {"model_version": DEFAULT_SERVED}
    tasks = [{"id": 1, "project": 7, "data": {"prompt": "a"}}, {"id": 2, "project": 7, "data": {"prompt": "b"}}]
    predict = client.post(
        "/predict",
        headers=basic(SECRET),
        json={
            "tasks": tasks,
            "project": "7.1700000000",
            "label_config": "<View/>",
            "params": {"login": None, "password": None, "context": None},
        },
    )
    assert predict.status_code == 200
    assert predict.json() == {"results": [[], []]}  # one entry per task, in order (tasks the store lacks)


@pytest.mark.parametrize(
    "headers,status", [({}, 401), (basic("wrong"), 403), ({"Authorization": "Bearer " + SECRET}, 401)]
)
def test_setup_and_predict_need_the_secret_as_basic_auth_password(app_client, db_url, headers, status):
    client = app_client()
    for path in ("/setup", "/predict"):
        answer = client.post(path, headers=headers, json={"project": "7.1", "tasks": []})
        assert answer.status_code == status, path
        assert SECRET not in answer.text
    assert stored(db_url)["raw"] == 0


@pytest.mark.parametrize(
    "headers,status", [({}, 401), ({"X-Preflab-Secret": "wrong"}, 403), ({"X-Preflab-Secret": SECRET[:-1]}, 403)]
)
def test_a_webhook_without_the_right_secret_is_refused_and_nothing_stored(app_client, db_url, headers, status, caplog):
    client = app_client()
    with caplog.at_level(logging.INFO, logger="preflab.server.access"):
        answer = client.post("/webhook", content=delivery(), headers=headers)
    assert answer.status_code == status
    assert stored(db_url)["raw"] == 0
    line = json.loads(next(r.getMessage() for r in caplog.records if r.name == "preflab.server.access"))
    assert line["path"] == "/webhook" and line["status"] == status and "secret" in line["note"]
    assert SECRET not in caplog.text and "wrong" not in json.dumps(line.get("client"))


def test_a_20_mb_body_gets_413_and_nothing_is_stored(app_client, db_url):
    client = app_client()
    big = b'{"action": "ANNOTATION_CREATED", "pad": "' + b"x" * 20_000_000 + b'"}'
    assert client.post("/webhook", content=big, headers=WEBHOOK_HEADERS).status_code == 413

    def chunked():  # no Content-Length: refused while reading, once past the limit
        yield big[:1_000_000]
        for start in range(1_000_000, len(big), 1_000_000):
            yield big[start : start + 1_000_000]

    assert client.post("/webhook", content=chunked(), headers=WEBHOOK_HEADERS).status_code == 413
    assert client.post("/predict", content=big, headers=basic(SECRET)).status_code == 413
    assert stored(db_url)["raw"] == 0


@pytest.mark.parametrize(
    "body,reason",
    [
        (b'{"action": "ANNOTATION_CREATED", "annotation": {"id": 1', "JSON"),
        (b'{"action": "PROJECT_CREATED", "project": {"id": 7}}', "PROJECT_CREATED"),
        (b'["ANNOTATION_CREATED"]', "object"),
        (b"\xff\xfe not even text", "JSON"),
        (b'{"action": "ANNOTATION_CREATED", "annotation": {"id": "5\x001"}}', "JSON"),  # a raw NUL: no JSON
    ],
)
def test_broken_json_or_an_unknown_event_gets_400_and_is_kept_in_quarantine(app_client, db_url, body, reason):
    from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE

    client = app_client()
    answer = client.post("/webhook", content=body, headers=WEBHOOK_HEADERS)
    assert answer.status_code == 400, answer.text
    [record] = raw_records(db_url)
    assert record.source == WEBHOOK_SOURCE and record.status == "quarantined" and record.reason
    assert (record.payload_bytes or record.payload.encode()) == body
    assert f"raw record {record.id}" in answer.json()["error"]
    # The same body again is the same record, not a second one.
    assert client.post("/webhook", content=body, headers=WEBHOOK_HEADERS).status_code == 400
    assert stored(db_url)["raw"] == 1


def test_a_delivery_is_acknowledged_at_once_and_its_replay_adds_nothing(app_client, db_url):
    client = app_client()
    first = client.post("/webhook", content=delivery(), headers=WEBHOOK_HEADERS)
    assert first.status_code == 200 and first.json()["new"] is True
    again = client.post("/webhook", content=delivery(), headers=WEBHOOK_HEADERS)
    assert again.status_code == 200 and again.json() == {"stored": first.json()["stored"], "new": False}
    assert stored(db_url) == {"raw": 1, "pending": 1, "ok": 0, "quarantined": 0, "rankings": 0}  # parsed later
    health = client.get("/health").json()
    assert health["deliveries"]["pending"] == 1 and health["deliveries"]["last_delivery_at"]


def test_without_a_secret_on_loopback_every_caller_is_let_in(app_client, db_url, monkeypatch):
    monkeypatch.delenv("PREFLAB_WEBHOOK_SECRET")
    client = app_client()
    assert client.post("/webhook", content=delivery()).status_code == 200
    assert client.post("/setup", json={"project": "7.1"}).json() == {"model_version": DEFAULT_SERVED}


def test_a_delivery_whose_transaction_fails_gets_500_and_nothing_is_stored(app_client, db_url, monkeypatch):
    from fastapi.testclient import TestClient

    from preflab.labelling.studio import webhooks

    real = webhooks.receive_many

    def failing(session, pairs):
        real(session, pairs)
        raise RuntimeError("the disk is gone")

    client = TestClient(app_client().app, raise_server_exceptions=False)
    monkeypatch.setattr(webhooks, "receive_many", failing)
    assert client.post("/webhook", content=delivery(), headers=WEBHOOK_HEADERS).status_code == 500
    assert stored(db_url)["raw"] == 0
    monkeypatch.setattr(webhooks, "receive_many", real)  # the receiver goes on with the next group
    assert client.post("/webhook", content=delivery(), headers=WEBHOOK_HEADERS).status_code == 200
    assert stored(db_url)["pending"] == 1
