"""Webhook deliveries built as Label Studio 1.23 posts them, for a project the store knows.

Built here rather than made through Label Studio: the server's tests need only what arrives
(the lead's end-to-end test drives a real Label Studio). The project is recorded as `ls sync`
records one; its tasks hold their prompt and candidates in the data, as any project's do.
"""

from __future__ import annotations

import json

from preflab.templates import label_config
from tests.labelling.ls_helpers import ranker_result

PROJECT = 7


def known_project(database_url: str, base_url: str, project_id: int = PROJECT) -> int:
    """Record Label Studio project `project_id` at `base_url` (ranking template) in the store."""
    from preflab.db.engine import open_sessions
    from preflab.labelling.studio.projects import ensure_project

    with open_sessions(database_url).begin() as session:
        ensure_project(
            session,
            base_url,
            project_id,
            title="served project",
            template="ranking",
            label_config=label_config("ranking"),
        )
    return project_id


def task(project_id: int, task_id: int) -> dict:
    items = [{"id": f"r{n}", "body": f"reply {n} to question {task_id}"} for n in range(3)]
    return {
        "id": task_id,
        "project": project_id,
        "data": {"prompt": f"question {task_id}?", "items": items},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "is_labeled": True,
    }


def annotated(
    project_id: int,
    task_id: int,
    user_id: int,
    *,
    annotation: int,
    order=("r2", "r0", "r1"),
    action: str = "ANNOTATION_CREATED",
    updated_at: str = "2026-01-01T00:00:00Z",
) -> bytes:
    """The body of ANNOTATION_CREATED (or _UPDATED): the annotation, its task and the project."""
    body = {
        "action": action,
        "annotation": {
            "id": annotation,
            "task": task_id,
            "project": project_id,
            "completed_by": user_id,
            "result": ranker_result({"rank": list(order)}),
            "was_cancelled": False,
            "ground_truth": False,
            "lead_time": 3.5,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": updated_at,
        },
        "task": task(project_id, task_id),
        "project": {"id": project_id, "title": "served project", "label_config": label_config("ranking")},
    }
    return json.dumps(body).encode()


def deleted(project_id: int, *annotation_ids: int) -> bytes:
    """ANNOTATIONS_DELETED: ids only."""
    return json.dumps(
        {
            "action": "ANNOTATIONS_DELETED",
            "annotations": [{"id": a} for a in annotation_ids],
            "project": {"id": project_id},
        }
    ).encode()
