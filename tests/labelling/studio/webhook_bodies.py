"""Webhook bodies in the exact shape Label Studio 1.23.2 posts, and what the webhook tests share.

The shapes are those of `webhooks/models.py` and `webhooks/serializers_for_hooks.py`
(the fields are those a real server sent), so the tests need no server; `deliver`
receives bodies as the server does, `apply` parses them, `texts` and `raw` read back.
"""

from __future__ import annotations

import json

from sqlalchemy import select

from preflab.db.models import Candidate, RawRecord
from preflab.labelling.studio.projects import ensure_project
from preflab.labelling.studio.webhook_apply import apply_pending
from preflab.labelling.studio.webhooks import receive
from preflab.templates import label_config
from tests.labelling.ls_helpers import ranker_result, rankings

BASE = "http://ls.example:8080"
PROJECT = 7
INVITE = "project-invite-token-never-stored"
STORAGE_PASSWORD = "task-data-password-never-stored"
# Label Studio's `updated_at` of successive versions.
T1, T2, T3, T4 = (
    "2026-03-01T10:00:00.100000Z",
    "2026-03-01T10:05:00.200000Z",
    "2026-03-01T10:09:00.300000Z",
    "2026-03-01T10:30:00Z",
)


def annotation(
    aid: int,
    task_id: int,
    order=("c2", "c1", "c3"),
    *,
    user: int = 1,
    cancelled: bool = False,
    when: str = T1,
    project: int = PROJECT,
) -> dict:
    """An annotation as AnnotationWebhookSerializer writes it (every model field; ids for relations)."""
    return {
        "id": aid,
        "result": [] if cancelled else ranker_result({"rank": list(order)}),
        "was_cancelled": cancelled,
        "ground_truth": False,
        "created_at": T1,
        "updated_at": when,
        "draft_created_at": None,
        "lead_time": 3.5,
        "prediction": {},
        "result_count": 0 if cancelled else 1,
        "unique_id": f"00000000-0000-4000-8000-{aid:012d}",
        "import_id": None,
        "last_action": None,
        "bulk_created": False,
        "task": task_id,
        "project": project,
        "completed_by": user,
        "updated_by": user,
        "parent_prediction": None,
        "parent_annotation": None,
        "last_created_by": None,
    }


def task(task_id: int, *, project: int = PROJECT, data: dict | None = None) -> dict:
    """A task as TaskWebhookSerializer writes it: its data, no annotations."""
    items = [{"id": f"c{n}", "title": f"Response {n}", "body": f"reply {n} to question {task_id}"} for n in (1, 2, 3)]
    prompt = f"question {task_id}?"
    data = (
        data
        if data is not None
        else {
            "prompt": prompt,
            "dialogue": [{"role": "user", "content": prompt}],
            "system": "",
            "items": items,
            "preflab_task": f"{task_id}:abc",
        }
    )
    return {
        "id": task_id,
        "data": data,
        "meta": {},
        "created_at": T1,
        "updated_at": T1,
        "is_labeled": True,
        "allow_skip": True,
        "overlap": 1,
        "inner_id": task_id,
        "total_annotations": 1,
        "cancelled_annotations": 0,
        "total_predictions": 0,
        "precomputed_agreement": None,
        "comment_count": 0,
        "unresolved_comment_count": 0,
        "last_comment_updated_at": None,
        "project": project,
        "updated_by": 1,
        "file_upload": None,
        "comment_authors": [],
    }


def project(pid: int = PROJECT) -> dict:
    """The project as ProjectWebhookSerializer writes it (some of its fields), secrets included."""
    return {
        "id": pid,
        "title": "webhooks",
        "label_config": label_config("ranking"),
        "token": INVITE,
        "task_data_login": "storage-user",
        "task_data_password": STORAGE_PASSWORD,
        "model_version": "",
        "maximum_annotations": 3,
        "organization": 1,
        "created_by": 1,
        "task_number": 2,
    }


def body(action: str, **payload) -> bytes:
    # Label Studio posts with requests' `json=`: json.dumps with its default separators.
    return json.dumps({"action": action, **payload}).encode()


def created(ann: dict, t: dict, pid: int = PROJECT) -> bytes:
    return body("ANNOTATION_CREATED", annotation=ann, task=t, project=project(pid))


def updated(ann: dict, t: dict) -> bytes:
    return body("ANNOTATION_UPDATED", annotation=ann, task=t, project=project())


def deleted(*ids: int) -> bytes:
    return body("ANNOTATIONS_DELETED", annotations=[{"id": a} for a in ids], project=project())


class Users:
    """Label Studio user id -> email, counting the calls (made only when an annotator must be named)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict[int, str]:
        self.calls += 1
        return {1: "ada@preflab.test", 2: "bo@preflab.test"}


def known_project(sessions) -> None:
    with sessions.begin() as session:
        ensure_project(
            session, BASE, PROJECT, title="webhooks", template="ranking", label_config=label_config("ranking")
        )


def deliver(sessions, *bodies: bytes):
    with sessions.begin() as session:
        return [receive(session, b, origin="127.0.0.1") for b in bodies]


def apply(sessions, users=None):
    with sessions.begin() as session:
        return apply_pending(session, BASE, users or Users())


def texts(sessions, url: str) -> dict[int, tuple]:
    """annotation id -> (status, version, annotator, tiers as candidate texts) of each ranking, newest version last."""
    with sessions() as session:
        text = dict(session.execute(select(Candidate.id, Candidate.text)).all())
    out: dict[int, list] = {}
    for r in rankings(url):
        out.setdefault(r["annotation"], []).append(
            (r["status"], r["version"], r["annotator"], [[text[c] for c in tier] for tier in r["tiers"]])
        )
    return out


def raw(sessions, source: str) -> list[RawRecord]:
    with sessions() as session:
        return session.scalars(select(RawRecord).where(RawRecord.source == source).order_by(RawRecord.id)).all()
