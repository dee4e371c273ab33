"""The webhook body Label Studio 1.23 posts for an annotation, as bench_serve.py's clients send it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

PROJECT = 41
TASKS = 520
LS_EPOCH = "2026-03-01T10:00:00"


def _stamp(seconds: int) -> str:
    """Label Studio's timestamp `seconds` after the project was made."""
    when = datetime.fromisoformat(LS_EPOCH) + timedelta(seconds=seconds, microseconds=seconds * 7 % 1_000_000)
    return when.isoformat(timespec="microseconds") + "Z"


def label_studio_body(
    action: str, annotation: int, user: int, task: dict, order: list[str], version: int, label_config: str
) -> bytes:
    """A webhook body as Label Studio 1.23 posts it: every field of the annotation, its task and the project."""
    created, updated = _stamp(annotation), _stamp(annotation + 86_400 * (version - 1))  # an edit: a day later
    ann = {
        "id": annotation,
        "result": [
            {
                "id": f"r{annotation}v{version}",
                "from_name": "rank",
                "to_name": "responses",
                "type": "ranker",
                "origin": "manual",
                "value": {"ranker": {"rank": order}},
            }
        ],
        "was_cancelled": False,
        "ground_truth": False,
        "created_at": created,
        "updated_at": updated,
        "draft_created_at": None,
        "lead_time": 12.5 + annotation % 40,
        "prediction": {},
        "result_count": 1,
        "unique_id": f"00000000-0000-4000-8000-{annotation:012d}",
        "import_id": None,
        "last_action": "updated" if version > 1 else None,
        "bulk_created": False,
        "task": task["id"],
        "project": PROJECT,
        "completed_by": user,
        "updated_by": user,
        "parent_prediction": None,
        "parent_annotation": None,
        "last_created_by": None,
    }
    project = {
        "id": PROJECT,
        "task_number": TASKS,
        "finished_task_number": 0,
        "total_predictions_number": 0,
        "total_annotations_number": annotation,
        "num_tasks_with_annotations": annotation // 3,
        "useful_annotation_number": annotation,
        "ground_truth_number": 0,
        "skipped_annotations_number": 0,
        "title": "bench serve",
        "description": "preflab ranking project",
        "label_config": label_config,
        "parsed_label_config": {
            "rank": {
                "type": "Ranker",
                "to_name": ["responses"],
                "inputs": [{"type": "List", "valueType": None, "value": "items"}],
                "labels": [],
                "labels_attrs": {},
            }
        },
        "label_config_hash": 1004393354671515870,
        "expert_instruction": "",
        "show_instruction": False,
        "show_skip_button": True,
        "enable_empty_annotation": True,
        "reveal_preannotations_interactively": False,
        "show_annotation_history": False,
        "show_collab_predictions": False,
        "evaluate_predictions_automatically": False,
        "token": "Xq3-invite-token-9fKd",
        "result_count": 0,
        "color": "#FFFFFF",
        "maximum_annotations": 3,
        "min_annotations_to_start_training": 0,
        "control_weights": {"rank": {"overall": 1.0, "type": "Ranker", "labels": {}}},
        "model_version": "",
        "data_types": {"system": "Text", "dialogue": "Paragraphs", "items": "List"},
        "is_draft": False,
        "is_published": False,
        "created_at": LS_EPOCH + "Z",
        "updated_at": LS_EPOCH + "Z",
        "sampling": "Sequential sampling",
        "skip_queue": "REQUEUE_FOR_OTHERS",
        "show_ground_truth_first": False,
        "annotator_evaluation_enabled": False,
        "show_overlap_first": False,
        "overlap_cohort_percentage": 100,
        "task_data_login": None,
        "task_data_password": None,
        "pinned_at": None,
        "custom_task_lock_ttl": None,
        "deleted_at": None,
        "purge_at": None,
        "search_vector": None,
        "organization": 1,
        "created_by": 1,
        "deleted_by": None,
    }
    body_task = {
        **task,
        "meta": {},
        "created_at": LS_EPOCH + "Z",
        "updated_at": updated,
        "is_labeled": False,
        "allow_skip": True,
        "overlap": 3,
        "inner_id": task["id"],
        "total_annotations": 1,
        "cancelled_annotations": 0,
        "total_predictions": 0,
        "precomputed_agreement": None,
        "comment_count": 0,
        "unresolved_comment_count": 0,
        "last_comment_updated_at": None,
        "project": PROJECT,
        "updated_by": user,
        "file_upload": None,
        "comment_authors": [],
    }
    return json.dumps({"action": action, "annotation": ann, "project": project, "task": body_task}).encode()
