"""Label Studio annotations → rankings, a batch of tasks per transaction.

Shared by `ls sync` (tasks paged from the server) and `ls import` (tasks
streamed from an export file). Each task is stored raw as it came, and each of
its annotations too, before anything is parsed. A task stored before is
skipped at the cost of a hash lookup, so a re-sync with nothing new writes
nothing; a task that held an annotation that could not be used is read again,
so a re-sync says it is still quarantined. A new annotation becomes a ranking
(version 1); an edited one supersedes its previous version (kept, marked
superseded) unless its ranking did not change; a skipped one is recorded with
no tiers, so it yields no pairs (`versions.py`). What cannot be used is
quarantined with the reason; text the database cannot store (a NUL, a lone
surrogate) anywhere in a task or an annotation is refused first, naming the
field, as every reader refuses it (`preflab.db.ingest.records.unstorable`).

The summary counts what happened to each annotation read (new, updated,
unchanged, quarantined now, still quarantined from before), then what the
project holds once the sync is done: its skipped annotations, old and new, and
its valid rankings identical to the order shown (counted as `preflab stats`
counts them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from preflab.console import plural
from preflab.db.bulk import lookup
from preflab.db.ingest.records import unstorable  # the rule of every reader: any field, any depth, keys too
from preflab.db.models import AnnotatorKind, Ranking, RankingStatus, RawRecord, RawStatus
from preflab.db.quality.agreement import same_as_shown_text
from preflab.db.store import payload_hash, quarantine, store_raw
from preflab.errors import Invalid
from preflab.labelling.studio.parse import (
    MAX_ID,
    TaskFields,
    TaskItems,
    ls_id,
    may_hold_flaws,
    payload,
    task_items,
    task_json,
)
from preflab.labelling.studio.projects import ProjectInfo
from preflab.labelling.studio.received import Received, as_received, shown_id
from preflab.labelling.studio.results import Buckets, parse_rankings
from preflab.labelling.studio.versions import SOURCE, Entry, write_rankings

TASK_SOURCE = "label-studio:task"  # raw records of whole tasks: a task seen before is skipped unparsed
# Raw records of whole tasks that hold a quarantined annotation: read again on each sync, so
# what is still unusable is said again (not skipped as nothing new).
HELD_SOURCE = "label-studio:task-held"


@dataclass
class SyncSummary:
    tasks: int = 0
    annotations: int = 0
    # What happened to each annotation read:
    # new + updated + unchanged + quarantined + still_quarantined = annotations.
    new: int = 0  # annotations seen for the first time (skipped ones included)
    updated: int = 0  # edited annotations: a new version superseded the old one
    unchanged: int = 0  # stored before, or edited without changing the ranking
    quarantined: int = 0  # quarantined now (tasks that are no task object included)
    still_quarantined: int = 0  # read again, and quarantined before: still unusable
    deleted: int = 0  # annotations gone from Label Studio: their rankings (one per criterion) are marked deleted
    # What the project holds once the sync is done (see `project_state`), old and new alike.
    skipped: int = 0  # skipped (cancelled) annotations, recorded without tiers
    same_as_shown: int = 0  # valid rankings identical to the order shown, as `preflab stats` counts them
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: SyncSummary) -> None:
        for name in (
            "tasks",
            "annotations",
            "new",
            "updated",
            "unchanged",
            "quarantined",
            "still_quarantined",
            "deleted",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for reason, n in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n

    @property
    def all_quarantined(self) -> bool:
        """Whether records were read and none of them could be used (every one quarantined, now or before)."""
        return self.quarantined + self.still_quarantined > 0 and self.new + self.updated + self.unchanged == 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        if not self.still_quarantined:
            bad = f"{self.quarantined:,} quarantined"
        elif not self.quarantined:
            bad = f"{self.still_quarantined:,} still quarantined"
        else:
            bad = f"{self.quarantined:,} newly quarantined, {self.still_quarantined:,} still quarantined"
        return (
            f"{plural(self.tasks, 'task')}, {plural(self.annotations, 'annotation')}: {self.new:,} new, "
            f"{self.updated:,} updated, {self.unchanged:,} unchanged, {bad}, "
            f"{self.deleted:,} deleted; the project holds {plural(self.skipped, 'skipped annotation')} and "
            f"{same_as_shown_text(self.same_as_shown)}"
        )


def project_state(session: Session, project: ProjectInfo, summary: SyncSummary) -> None:
    """Set the summary's counts of what the project holds: its skipped annotations and untouched rankings."""

    def count(*where) -> int:
        return session.scalar(
            select(func.count())
            .select_from(Ranking)
            .where(Ranking.ls_project_id == project.id, Ranking.source == SOURCE, *where)
        )

    summary.skipped = count(Ranking.status == RankingStatus.skipped.value)
    summary.same_as_shown = count(Ranking.status == RankingStatus.valid.value, Ranking.same_as_shown.is_(True))


def _annotator(annotation: dict, users: dict[int, str]) -> tuple[tuple[str, str], int | None]:
    """(("human", name), Label Studio user id or None): the name is the user's email when known."""
    who = annotation.get("completed_by")
    email = None
    if isinstance(who, dict):  # some exports expand the user: its id and email, or (JSON_MIN) the email alone
        email, who = who.get("email"), who.get("id")
    if who is None and isinstance(email, str) and email.strip():
        name = email
    elif isinstance(who, int) and not isinstance(who, bool):
        ls_id(who, "completed_by user id")
        name = users.get(who) or email or f"label-studio-user-{who}"
    else:
        raise Invalid("annotation has no completed_by user id")
    if not isinstance(name, str) or unstorable(name) or len(name) > 300:
        raise Invalid(
            "the annotator's email is not text the database can store (a NUL, a lone surrogate, or over 300 characters)"
        )
    return (AnnotatorKind.human.value, name), who


def _quarantine_task(session: Session, origin: str, locator: str, text: str, reason: str, summary: SyncSummary) -> None:
    received = as_received(text)
    raw = store_raw(session, SOURCE, origin, [(locator, received)])
    rid, status = raw[payload_hash(received)]
    if status == RawStatus.ok.value:  # new: quarantine it
        quarantine(session, {rid: reason})
        _count_reason(summary, reason)
    else:  # read again: said again, not counted as new
        summary.still_quarantined += 1


def _count_reason(summary: SyncSummary, reason: str) -> None:
    summary.quarantined += 1
    summary.reasons[reason] = summary.reasons.get(reason, 0) + 1


@dataclass
class _Pending:
    """One annotation of a task read for the first time, stored raw before it is parsed."""

    task_hash: str
    task: dict
    annotation: Any
    text: str
    flaw: str | None  # why the database cannot store what it holds (a NUL, a lone surrogate)


def _parse(
    task: dict,
    ann: Any,
    users: dict[int, str],
    fields: TaskFields,
    buckets: Buckets | None,
    items: dict[int, TaskItems | Invalid],
    raw_id: int,
) -> Entry:
    """The entry of one annotation; raises Invalid with the reason it is quarantined."""
    if not isinstance(ann, dict):
        raise Invalid("annotation is not an object")
    aid = ann.get("id")
    if not isinstance(aid, int) or isinstance(aid, bool):
        raise Invalid("annotation has no integer id")
    ls_id(aid, "annotation id")
    if task.get("id") is not None:
        ls_id(task.get("id"), "task id")
    key = id(task)
    if key not in items:  # a task's data is read once for all its annotations
        try:
            items[key] = task_items(task.get("data"), fields)
        except Invalid as exc:
            items[key] = exc
    if isinstance(items[key], Invalid):
        raise items[key]
    annotator, user = _annotator(ann, users)
    rankings = parse_rankings(ann, items[key].ids, buckets)
    return Entry(task, ann, raw_id, aid, items[key], rankings, annotator, user)


def store_tasks(
    session: Session,
    project: ProjectInfo,
    received: list[Received],
    users: dict[int, str],
    fields: TaskFields = TaskFields(),
    seen: set[int] | None = None,
    origin: str | None = None,
) -> SyncSummary:
    """Store the annotations of one batch of tasks inside the caller's transaction.

    Args:
        project: the Label Studio project the tasks belong to.
        received: the tasks as Label Studio lists or exports them (id, data, annotations).
        users: Label Studio user id -> email, for annotator names.
        seen: collects the ids of every annotation present (deletion is judged from it).
        origin: where the tasks came from (project URL or export file), kept on raw records.
    """
    summary = SyncSummary()
    origin = origin or f"{project.base_url}/projects/{project.project_id}"
    by_hash = _batch_tasks(session, origin, received, seen, summary)
    fresh_tasks = _fresh_tasks(session, by_hash, summary)
    if not fresh_tasks:
        return summary
    held: set[str] = set()  # tasks with an annotation that is quarantined
    new = _store_annotations(session, origin, _annotations(fresh_tasks), held, summary)
    _parse_and_write(session, project, new, users, fields, held, summary)
    _store_task_records(session, origin, fresh_tasks, held)
    return summary


def _batch_tasks(
    session: Session, origin: str, received: list[Received], seen: set[int] | None, summary: SyncSummary
) -> dict[str, Received]:
    """The batch's tasks that hold annotations, once each, by hash; one that is no task object is quarantined."""
    by_hash: dict[str, Received] = {}
    for n, r in enumerate(received):
        if r.unusable is not None or r.count < 0:
            reason = r.unusable or "task is not an object with an annotations list"
            _quarantine_task(session, origin, f"task #{n + 1} of the batch", r.text, reason, summary)
            continue
        summary.tasks += 1
        summary.annotations += r.count
        if seen is not None and r.count:
            seen.update(
                a["id"] for a in r.decoded()["annotations"] if isinstance(a, dict) and isinstance(a.get("id"), int)
            )
        if r.count:
            h = payload_hash(r.text)
            if h in by_hash:  # the very same task twice in one batch
                summary.unchanged += r.count
                continue
            by_hash[h] = r
    return by_hash


def _fresh_tasks(session: Session, by_hash: dict[str, Received], summary: SyncSummary) -> dict[str, Received]:
    """The tasks not stored exactly so before, by hash."""
    # A task stored exactly so before was fully handled then: skip it without decoding it. One
    # that held annotations the database could not use (HELD) is read again, to say so again.
    known = {
        h
        for h, src in lookup(session, RawRecord.__table__, ("payload_hash", "source"), "payload_hash", list(by_hash))
        if src == TASK_SOURCE
    }
    summary.unchanged += sum(r.count for h, r in by_hash.items() if h in known)
    return {h: r for h, r in by_hash.items() if h not in known}


def _annotations(fresh_tasks: dict[str, Received]) -> list[_Pending]:
    """Each annotation of the fresh tasks, as its raw record will hold it, with what the database cannot store."""
    pending: list[_Pending] = []
    for h, r in fresh_tasks.items():
        task = r.decoded()
        shared = task_json(task)
        # Text the database cannot store is refused here, naming where it is, before anything is parsed.
        flawed = may_hold_flaws(r.text)
        task_flaw = unstorable({k: v for k, v in task.items() if k != "annotations"}, "task") if flawed else None
        for ann in task["annotations"]:
            flaw = task_flaw or (unstorable(ann, "annotation") if flawed else None)
            pending.append(
                _Pending(h, task, ann, payload(shared, ann if isinstance(ann, dict) else {"value": ann}), flaw)
            )
    return pending


def _store_annotations(
    session: Session, origin: str, pending: list[_Pending], held: set[str], summary: SyncSummary
) -> dict[int, _Pending]:
    """The annotations not stored before, stored raw, by raw record id; the others counted (`held`: quarantined)."""
    by_payload = {payload_hash(p.text): p for p in pending}
    summary.unchanged += len(pending) - len(by_payload)
    for _, h, src, status in lookup(
        session, RawRecord.__table__, ("id", "payload_hash", "source", "status"), "payload_hash", list(by_payload)
    ):
        if src != SOURCE:
            continue
        p = by_payload.pop(h)  # stored before: already a ranking, or quarantined
        if status == RawStatus.quarantined.value:
            summary.still_quarantined += 1
            held.add(p.task_hash)
        else:
            summary.unchanged += 1
    if not by_payload:
        return {}
    raw = store_raw(
        session,
        SOURCE,
        origin,
        [
            (
                f"task {shown_id(p.task.get('id'))} annotation "
                f"{shown_id(p.annotation.get('id') if isinstance(p.annotation, dict) else None)}",
                p.text,
            )
            for p in by_payload.values()
        ],
        append=True,
    )
    return {raw[h][0]: p for h, p in by_payload.items()}


def _parse_and_write(
    session: Session,
    project: ProjectInfo,
    new: dict[int, _Pending],
    users: dict[int, str],
    fields: TaskFields,
    held: set[str],
    summary: SyncSummary,
) -> None:
    """Parse the new annotations and write their rankings; quarantine, with the reason, those that cannot be used."""
    entries: list[Entry] = []
    reasons: dict[int, str] = {}
    invalid: dict[int, int | None] = {}  # annotation id -> its task's id, of those that cannot be used
    item_cache: dict[int, TaskItems | Invalid] = {}
    for raw_id, p in new.items():
        try:
            if p.flaw:
                raise Invalid(p.flaw)
            entries.append(_parse(p.task, p.annotation, users, fields, project.rankers, item_cache, raw_id))
        except Invalid as exc:
            reasons[raw_id] = str(exc)
            aid = p.annotation.get("id") if isinstance(p.annotation, dict) else None
            if isinstance(aid, int) and not isinstance(aid, bool) and 0 < aid <= MAX_ID:
                invalid[aid] = p.task.get("id")
    if entries or invalid:
        written = write_rankings(session, project, entries, invalid)
        summary.new += written.new
        summary.updated += written.updated
        summary.unchanged += written.unchanged
        reasons.update(written.moved)
    for raw_id, reason in reasons.items():
        _count_reason(summary, reason)
        held.add(new[raw_id].task_hash)
    quarantine(session, reasons)


def _store_task_records(session: Session, origin: str, fresh_tasks: dict[str, Received], held: set[str]) -> None:
    """Store each fresh task whole: skipped on the next sync, or (`held`) read again to say what is unusable."""
    # Appended (COPY on Postgres): a race with another writer fails the transaction, which the
    # caller runs again (`in_transaction`).
    for source, hashes in ((TASK_SOURCE, [h for h in fresh_tasks if h not in held]), (HELD_SOURCE, sorted(held))):
        store_raw(
            session,
            source,
            origin,
            [(f"task {shown_id(fresh_tasks[h].decoded().get('id'))}", fresh_tasks[h].text) for h in hashes],
            append=True,
        )
