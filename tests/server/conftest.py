"""Fixtures for `preflab serve`: the app in-process (FastAPI's TestClient) on a real store.

Label Studio is not needed to receive, refuse or store deliveries, so most tests point the
server at a loopback port where nothing listens (the workers that need Label Studio then
say so in /health and try again later). The deliveries are built here in the shape Label
Studio 1.23 posts them (`webhooks/utils.py`: the action, the annotation, its task, the project).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import time

import pytest
from sqlalchemy import func, select

from preflab.db.models import Ranking, RawRecord
from tests.labelling.ls_fixtures import (  # noqa: F401  (fixtures)
    label_studio_bin_path,
    ls_env,
    ls_server,
    reserved_port,
    start_server,
    started_elsewhere,
    stop_server,
    uses_label_studio,
)
from tests.labelling.ls_helpers import session

SECRET = "s3cret-for-the-tests"
# What serves with nothing trained and no --judge: the embedded model's likelihood judge, the very annotator
# `preflab judge likelihood` ranks as (its run id is that of the judge's default configuration).
DEFAULT_SERVED = "judge:likelihood:c1c63abc2fbb1157:smollm2-135m-instruct"
# Projects the store knows and Label Studio does not (the run's Label Studio is shared): its startup sync
# of them fails, and so never marks these deliveries' rankings as deleted for being absent there.
_PROJECTS = itertools.count(990_000 + os.getpid() % 1000 * 10)


def pytest_collection_finish(session):
    # Label Studio takes minutes to start: begin now (as tests/labelling does; starting twice is a no-op).
    if (
        uses_label_studio(session.items)
        and not session.config.option.collectonly
        and not started_elsewhere()
        and os.access(label_studio_bin_path(), os.X_OK)
    ):
        start_server()


def pytest_sessionfinish(session, exitstatus):
    stop_server()


def unknown_to_label_studio() -> int:
    return next(_PROJECTS)


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def basic(password: str, user: str = "preflab") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def delivery(
    action: str = "ANNOTATION_CREATED",
    *,
    annotation_id: int = 501,
    task_id: int = 9001,
    project_id: int = 7,
    user_id: int = 3,
    result=None,
) -> bytes:
    """A webhook body as Label Studio sends one (only the fields preflab reads, plus a few it ignores)."""
    annotation = {
        "id": annotation_id,
        "task": task_id,
        "project": project_id,
        "completed_by": user_id,
        "result": result if result is not None else [],
        "was_cancelled": False,
        "lead_time": 4.2,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    body = {
        "action": action,
        "annotation": annotation,
        "task": {"id": task_id, "project": project_id, "data": {"prompt": "hello"}},
        "project": {"id": project_id, "title": "webhook test"},
    }
    return json.dumps(body).encode()


def stored(url: str) -> dict[str, int]:
    """What the store holds: raw records of any source, deliveries by status, and rankings."""
    from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE

    with session(url) as s:
        by_status = dict(
            s.execute(
                select(RawRecord.status, func.count())
                .where(RawRecord.source == WEBHOOK_SOURCE)
                .group_by(RawRecord.status)
            ).all()
        )
        return {
            "raw": s.scalar(select(func.count()).select_from(RawRecord)),
            **{status: by_status.get(status, 0) for status in ("pending", "ok", "quarantined")},
            "rankings": s.scalar(select(func.count()).select_from(Ranking)),
        }


def raw_records(url: str) -> list[RawRecord]:
    with session(url) as s:
        return list(s.scalars(select(RawRecord).order_by(RawRecord.id)))


@pytest.fixture
def nowhere(monkeypatch):
    """LABEL_STUDIO_URL at a loopback port where nothing listens (connections refused at once)."""
    sock = reserved_port()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("LABEL_STUDIO_URL", url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "not-a-real-token")
    yield url
    sock.close()


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> str:
    """A tiny causal LM to serve as the global --model: a server loads its judge's model as it starts, and the
    embedded one takes seconds (a first conversion, a minute) and half a gigabyte."""
    from tests.tiny_models import tiny_causal_lm

    return str(tiny_causal_lm(tmp_path_factory.mktemp("serve-lm") / "lm"))


@pytest.fixture
def secret(monkeypatch) -> str:
    monkeypatch.setenv("PREFLAB_WEBHOOK_SECRET", SECRET)
    return SECRET


@pytest.fixture
def label_studio_url(nowhere) -> str:
    """The Label Studio the app is pointed at (override with the real one: `ls_env`)."""
    return nowhere


@pytest.fixture
def app_client(db_url, label_studio_url, secret):
    """`make(background=False, model=None, **config)`: a TestClient on the app, its lifespan (and workers) running;
    `model` is the global --model (default: the embedded one), which serves while nothing is trained."""
    from fastapi.testclient import TestClient

    from preflab.server.app import create_app
    from preflab.server.config import ServeConfig
    from preflab.settings import DEFAULT_MODEL, Settings

    clients = []

    def make(background: bool = False, model: str | None = None, **config) -> TestClient:
        settings = Settings(db_url, label_studio_url, model or DEFAULT_MODEL)
        app = create_app(settings, ServeConfig(**config), background=background)
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
