"""Applying stored webhook deliveries: each parsed as `ls sync` parses annotations.

A delivery becomes the task(s) `ls sync` would have read, each holding the
delivery's annotations, and goes through `annotations.store_tasks`: an edit
supersedes, a skip is recorded, a version is stored once. A delivery no newer
than the version stored (by Label Studio's `updated_at`: a replay, one `ls sync`
read first, one applied late) adds nothing, and no delivery brings back an
annotation marked deleted. A deletion marks rankings as `ls sync` does
(`sync.delete_annotations`). A project preflab does not know, or a delivery it
cannot read, is quarantined with the reason.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from preflab.console import plural
from preflab.db.engine import as_utc
from preflab.db.models import Annotator, AnnotatorKind, Ranking, RankingStatus, RawRecord, RawStatus
from preflab.db.store import quarantine
from preflab.errors import Invalid, NotFound
from preflab.labelling.studio.annotations import store_tasks
from preflab.labelling.studio.parse import TaskFields, ls_id
from preflab.labelling.studio.projects import ProjectInfo, find_project, same_server
from preflab.labelling.studio.received import Received, shown_id
from preflab.labelling.studio.sync import delete_annotations
from preflab.labelling.studio.versions import SOURCE, Previous, latest_versions
from preflab.labelling.studio.webhooks import EVENTS, IS_DELIVERY

log = logging.getLogger(__name__)

MANY = "ANNOTATIONS_CREATED"  # `annotation` and `task` are lists
DELETED = "ANNOTATIONS_DELETED"
CREATED = EVENTS - {DELETED}  # the events that carry annotations


@dataclass
class WebhookSummary:
    """What `apply_pending` did: per delivery, then per annotation (counted as `ls sync` counts them)."""

    deliveries: int = 0  # deliveries applied or quarantined
    annotations: int = 0  # annotations they carried (deletions not included)
    new: int = 0  # annotations stored for the first time (skipped ones included)
    updated: int = 0  # edits: a new version superseded the old one
    unchanged: int = 0  # stored before (a replay, `ls sync` first), or no newer than what is stored
    deleted: int = 0  # annotations deleted: their rankings (one per criterion) marked deleted
    skipped: int = 0  # of the new and updated: skipped (cancelled) annotations, recorded without tiers
    quarantined: int = 0  # deliveries quarantined (an unknown project, an annotation that cannot be used)
    reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        return (
            f"{plural(self.deliveries, 'delivery', 'deliveries')}, {plural(self.annotations, 'annotation')}: "
            f"{self.new:,} new ({self.skipped:,} skipped), {self.updated:,} updated, {self.unchanged:,} unchanged, "
            f"{self.deleted:,} deleted; {self.quarantined:,} quarantined"
        )


def _when(value: Any) -> datetime | None:
    """Label Studio's `updated_at` as a UTC datetime; None when absent or not a timestamp."""
    if not isinstance(value, str):
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None


def _project(session: Session, base_url: str, value: dict, known: dict[int, ProjectInfo]) -> ProjectInfo:
    project = value.get("project")
    one = value.get("annotation")
    pid = project.get("id") if isinstance(project, dict) else one.get("project") if isinstance(one, dict) else None
    if pid is None:
        raise Invalid("the delivery names no project")
    pid = ls_id(pid, "project id")
    if pid not in known:
        try:
            known[pid] = find_project(session, base_url, pid)
        except NotFound:
            raise Invalid(
                f"preflab knows no Label Studio project {pid} at {base_url} "
                f"(`preflab ls sync --project {pid}` records it)"
            ) from None
    return known[pid]


def _deleted_ids(value: dict) -> list[int]:
    listed = value.get("annotations")
    if not isinstance(listed, list):
        raise Invalid("the deletion's 'annotations' is not a list")
    return [ls_id(a.get("id") if isinstance(a, dict) else a, "deleted annotation id") for a in listed]


def _tasks(value: dict, project: ProjectInfo) -> list[tuple[dict, list[dict]]]:
    """The delivery's tasks, each with its annotations (in the order sent); raises Invalid."""
    anns, tasks = value.get("annotation"), value.get("task")
    if value["action"] != MANY:
        anns, tasks = [anns], [tasks]
    if not isinstance(anns, list) or not anns or not all(isinstance(a, dict) for a in anns):
        raise Invalid("the delivery holds no annotation object (does the webhook send its payload?)")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise Invalid("the delivery holds no task object")
    by_id = {ls_id(t.get("id"), "task id"): t for t in tasks}
    out: dict[int, tuple[dict, list[dict]]] = {}
    for ann in anns:
        aid = ls_id(ann.get("id"), "annotation id")
        tid = ls_id(ann.get("task"), f"annotation {aid}'s task id")
        if tid not in by_id:
            raise Invalid(f"annotation {aid} is on task {tid}, which the delivery does not hold")
        if ann.get("project") not in (None, project.project_id):
            raise Invalid(
                f"annotation {aid} is in project {shown_id(ann.get('project'))}, not project {project.project_id}"
            )
        out.setdefault(tid, (by_id[tid], []))[1].append(ann)
    return list(out.values())


def _stored_when(session: Session, previous: dict[int, Previous]) -> dict[int, datetime | None]:
    """annotation id -> Label Studio's `updated_at` of its stored version (read from that version's raw record)."""
    by_ranking = {p.ranking_id: aid for aid, p in previous.items()}
    out: dict[int, datetime | None] = dict.fromkeys(previous)
    for rid, text in session.execute(
        select(Ranking.id, RawRecord.payload)
        .join(RawRecord, RawRecord.id == Ranking.raw_record_id)
        .where(Ranking.id.in_(list(by_ranking)))
    ):
        # A stored version whose time cannot be read: the delivery is compared by content alone.
        with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            out[by_ranking[rid]] = _when(orjson.loads(text)["annotation"].get("updated_at"))
    return out


def _user_id(annotation: Any) -> int | None:
    who = annotation.get("completed_by") if isinstance(annotation, dict) else None
    return who if isinstance(who, int) and not isinstance(who, bool) else None


def _names_needed(session: Session, base_url: str, values: list[Any], known: dict[int, ProjectInfo]) -> bool:
    """Whether an annotation's user has ranked in no project of its server yet (so is named by email).

    A user who has is the same person whatever they are named (`versions._people`).
    Read before anything is written: on SQLite, `users()` (a call to Label Studio)
    is then made without holding the write lock that `receive` waits for.
    """
    by_project: dict[int, set[int]] = {}
    for value in values:
        if value.get("action") not in CREATED:
            continue
        try:
            project = _project(session, base_url, value, known)
        except Invalid:
            continue  # quarantined when it is applied
        anns = value.get("annotation")
        users = by_project.setdefault(project.project_id, set())
        users.update(filter(None, map(_user_id, anns if isinstance(anns, list) else [anns])))
    for pid, users in by_project.items():
        ranked_here = exists().where(
            Ranking.annotator_id == Annotator.id,
            Ranking.source == SOURCE,
            Ranking.ls_project_id.in_(same_server(session, known[pid])),
        )
        if users and users - set(
            session.scalars(
                select(Annotator.ls_user_id).where(
                    Annotator.kind == AnnotatorKind.human.value, Annotator.ls_user_id.in_(users), ranked_here
                )
            )
        ):
            return True
    return False


def _apply_annotations(
    session: Session,
    project: ProjectInfo,
    value: dict,
    users: dict[int, str],
    fields: TaskFields,
    summary: WebhookSummary,
) -> str | None:
    """Store a delivery's annotations as `ls sync` would; returns why it is quarantined (None: it is not)."""
    tasks = _tasks(value, project)
    count = sum(len(anns) for _, anns in tasks)
    summary.annotations += count
    aids = [a["id"] for _, anns in tasks for a in anns]
    before = latest_versions(session, project.id, aids)
    stored_at = _stored_when(session, before)
    fresh: list[tuple[dict, list[dict]]] = []
    for task, anns in tasks:
        newer = []
        for ann in anns:
            prior = before.get(ann["id"])
            sent, stored = _when(ann.get("updated_at")), stored_at.get(ann["id"])
            if prior is not None and (
                prior.status == RankingStatus.deleted.value
                or (sent is not None and stored is not None and sent <= stored)
            ):
                summary.unchanged += 1  # deleted for good, or this version (or a newer one) is stored already
            else:
                newer.append(ann)
        if newer:
            fresh.append((task, newer))
    if not fresh:
        return None
    anns = [a for _, newer in fresh for a in newer]
    received = [Received.of({**task, "annotations": newer}) for task, newer in fresh]
    stored = store_tasks(session, project, received, users, fields)
    summary.new += stored.new
    summary.updated += stored.updated
    summary.unchanged += stored.unchanged
    cancelled = [a["id"] for a in anns if a.get("was_cancelled")]
    if cancelled:
        after = latest_versions(session, project.id, cancelled)
        summary.skipped += sum(
            1
            for aid, p in after.items()
            if p.status == RankingStatus.skipped.value and (aid not in before or before[aid].ranking_id != p.ranking_id)
        )
    bad = stored.quarantined + stored.still_quarantined
    if not bad:
        return None
    first = next(iter(stored.reasons), "the annotation was quarantined before and is still unusable")
    return first if count == 1 else f"{bad} of its {count} annotations cannot be used: {first}"


def _decoded(text: str, data: bytes | None) -> Any:
    try:
        return orjson.loads(data if data is not None else text)
    except orjson.JSONDecodeError:
        return None  # never from `receive` (it keeps only JSON pending): quarantined, not stopping the rest


def _apply(
    session: Session,
    base_url: str,
    value: Any,
    known: dict[int, ProjectInfo],
    users: dict[int, str],
    fields: TaskFields,
    summary: WebhookSummary,
) -> str | None:
    if not isinstance(value, dict) or value.get("action") not in EVENTS:
        raise Invalid("the delivery is not a JSON object naming an annotation event")
    if value["action"] == DELETED and not value.get("annotations"):
        return None  # Label Studio deleted nothing (it then sends the action alone)
    project = _project(session, base_url, value, known)
    if value["action"] == DELETED:
        summary.deleted += delete_annotations(session, project, _deleted_ids(value))
        return None
    return _apply_annotations(session, project, value, users, fields, summary)


def apply_pending(
    session: Session,
    base_url: str,
    users: Callable[[], dict[int, str]],
    limit: int = 100,
    *,
    fields: TaskFields = TaskFields(),
) -> WebhookSummary:
    """Parse up to `limit` pending deliveries, oldest first, inside the caller's transaction.

    Each is then marked ok, or quarantined with the reason (an unknown project, a
    task or an annotation that cannot be used, as `ls sync` would quarantine it).

    Args:
        base_url: the Label Studio server the deliveries come from (its projects are looked up there).
        users: Label Studio user id -> email, called at most once, before anything is written, and
            only when a user ranks for the first time (named by email, as `ls sync` names them).
        fields: where the prompt and candidates are in the tasks' data (as `ls sync --prompt-field …`).
    """
    summary, known = WebhookSummary(), {}
    # On Postgres another process applying deliveries at once takes the others (SQLite has one writer).
    rows = session.execute(
        select(RawRecord.id, RawRecord.payload, RawRecord.payload_bytes)
        .where(IS_DELIVERY, RawRecord.status == RawStatus.pending.value)
        .order_by(RawRecord.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    values = [(raw_id, _decoded(text, data)) for raw_id, text, data in rows]
    names = users() if _names_needed(session, base_url, [v for _, v in values if isinstance(v, dict)], known) else {}
    done, reasons = [], {}
    for raw_id, value in values:
        summary.deliveries += 1
        try:
            reason = _apply(session, base_url, value, known, names, fields, summary)
        except Invalid as exc:
            reason = str(exc)
        if reason is None:
            done.append(raw_id)
        else:
            reasons[raw_id] = reason
            summary.quarantined += 1
            summary.reasons[reason] = summary.reasons.get(reason, 0) + 1
            log.warning("webhook delivery #%d quarantined: %s", raw_id, reason)
    if done:
        session.execute(update(RawRecord), [{"id": rid, "status": RawStatus.ok.value} for rid in done])
    quarantine(session, reasons)
    return summary
