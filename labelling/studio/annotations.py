"""Label Studio annotations → rankings, a batch of tasks per transaction.

Shared by `ls sync` (tasks paged from the server) and `ls import` (tasks
streamed from an export file). Each task is stored raw as it came, and each of
its annotations too, before anything is parsed. A task stored before is
skipped at the cost of a hash lookup, so a re-sync with nothing new writes
nothing. A new annotation becomes a ranking (version 1); an edited one
supersedes its previous version (kept, marked superseded) unless its ranking
did not change; a skipped one is recorded with no tiers, so it yields no
pairs. What cannot be parsed is quarantined with the reason.

The summary counts what happened to each annotation read (new, updated,
unchanged, quarantined), then what the project holds once the sync is done:
its skipped annotations, old and new, and its valid rankings identical to the
order shown (counted as `preflab stats` counts them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from preflab.console import plural
from preflab.db.agreement import same_as_shown_text
from preflab.db.bulk import IN_CHUNK, append_rows, in_values, lookup
from preflab.db.ingest import Invalid
from preflab.db.models import AnnotatorKind, Ranking, RankingItem, RankingStatus, RawRecord, utcnow
from preflab.db.store import chunks, content_hash, ensure_annotators, ensure_candidates, ensure_prompts, \
    payload_hash, quarantine, store_raw
from preflab.labelling.studio.parse import VOLATILE, Parsed, TaskFields, TaskItems, ls_id, parse_annotation, \
    payload, same_as_shown, task_items, task_json
from preflab.labelling.studio.projects import ProjectInfo

SOURCE = "label-studio"  # raw records of annotations, and the rankings made from them
TASK_SOURCE = "label-studio:task"  # raw records of whole tasks: a task seen before is skipped unparsed
LIVE = (RankingStatus.valid.value, RankingStatus.skipped.value)


@dataclass
class SyncSummary:
    tasks: int = 0
    annotations: int = 0
    # What happened to each annotation read: new + updated + unchanged + quarantined = annotations.
    new: int = 0          # annotations seen for the first time (skipped ones included)
    updated: int = 0      # edited annotations: a new version superseded the old one
    unchanged: int = 0    # stored before, or edited without changing the ranking
    quarantined: int = 0
    deleted: int = 0      # annotations gone from Label Studio: their rankings are marked deleted
    # What the project holds once the sync is done (see `project_state`), old and new alike.
    skipped: int = 0        # skipped (cancelled) annotations, recorded without tiers
    same_as_shown: int = 0  # valid rankings identical to the order shown, as `preflab stats` counts them
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: "SyncSummary") -> None:
        for name in ("tasks", "annotations", "new", "updated", "unchanged", "quarantined", "deleted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for reason, n in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        return (f"{plural(self.tasks, 'task')}, {plural(self.annotations, 'annotation')}: {self.new:,} new, "
                f"{self.updated:,} updated, {self.unchanged:,} unchanged, {self.quarantined:,} quarantined, "
                f"{self.deleted:,} deleted; the project holds {plural(self.skipped, 'skipped annotation')} and "
                f"{same_as_shown_text(self.same_as_shown)}")


def project_state(session: Session, project: ProjectInfo, summary: SyncSummary) -> None:
    """Set the summary's counts of what the project holds: its skipped annotations and untouched rankings."""
    def count(*where) -> int:
        return session.scalar(select(func.count()).select_from(Ranking).where(
            Ranking.ls_project_id == project.id, Ranking.source == SOURCE, *where))

    summary.skipped = count(Ranking.status == RankingStatus.skipped.value)
    summary.same_as_shown = count(Ranking.status == RankingStatus.valid.value, Ranking.same_as_shown.is_(True))


@dataclass
class _Entry:
    task: dict
    annotation: dict
    raw_id: int
    annotation_id: int | None = None
    items: TaskItems | None = None
    parsed: Parsed | None = None
    annotator: tuple[str, str] | None = None
    ls_user_id: int | None = None


def _annotator(annotation: dict, users: dict[int, str]) -> tuple[tuple[str, str], int]:
    """(("human", name), Label Studio user id): the name is the user's email when known."""
    who = annotation.get("completed_by")
    email = None
    if isinstance(who, dict):  # older exports expand the user
        email, who = who.get("email"), who.get("id")
    if not isinstance(who, int) or isinstance(who, bool):
        raise Invalid("annotation has no completed_by user id")
    ls_id(who, "completed_by user id")
    name = users.get(who) or email or f"label-studio-user-{who}"
    if not isinstance(name, str) or "\x00" in name or len(name) > 300:
        raise Invalid("the annotator's email is not text the database can store (a NUL, or over 300 characters)")
    return (AnnotatorKind.human.value, name), who


def _lead_time(annotation: dict) -> float | None:
    """Seconds Label Studio says the annotator spent (`lead_time`); None when absent or not a sane number."""
    value = annotation.get("lead_time")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < 1e9 else None  # NaN and infinities fail the comparison


LONE_SURROGATE = "holds a lone UTF-16 surrogate (a \\udXXX escape on its own), which is not text"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_received(text: str) -> str | bytes:
    """What a task's text is stored as: the bytes received where they were not UTF-8 text."""
    if _encodable(text):
        return text
    return text.encode("utf-8", "surrogateescape")  # read with surrogateescape: give back the very bytes


def _quarantine_task(session: Session, origin: str, locator: str, text: str, reason: str,
                     summary: SyncSummary) -> None:
    received = as_received(text)
    raw = store_raw(session, SOURCE, origin, [(locator, received)])
    rid, status = raw[payload_hash(received)]
    if status == "ok":  # new: quarantine it; one quarantined before is not counted twice
        quarantine(session, {rid: reason})
        _count_reason(summary, reason)


def _count_reason(summary: SyncSummary, reason: str) -> None:
    summary.quarantined += 1
    summary.reasons[reason] = summary.reasons.get(reason, 0) + 1


def _tiers_key(tiers: Iterable[tuple[int, Iterable[int]]]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(position, candidate ids) per tier: moving a tier to another bucket is a change too."""
    return tuple((position, tuple(sorted(t))) for position, t in tiers)


def task_text(task: dict) -> str:
    """A task as received, for its raw record (the fields Label Studio recomputes on every request left out)."""
    annotations = task.get("annotations")
    if isinstance(annotations, list):
        task = dict(task, annotations=[{k: v for k, v in a.items() if k not in VOLATILE} if isinstance(a, dict) else a
                                       for a in annotations])
    return json.dumps(task, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def annotation_count(task: Any) -> int:
    """How many annotations a task holds; -1 when it is not a task object with an annotations list."""
    if not isinstance(task, dict) or not isinstance(task.get("annotations", []), list):
        return -1
    return len(task.get("annotations") or [])


@dataclass
class Received:
    """One task as it came: its JSON text (kept as its raw record) and its annotation count.

    `task` may be left out (an export file): it is then decoded from the text only
    if the task is new, so a re-sync of a large file holds no decoded tasks.
    """

    text: str
    count: int
    task: Any = None
    unusable: str | None = None  # why the task cannot be read at all (it is quarantined whole)

    @classmethod
    def of(cls, task: Any) -> "Received":
        """A task decoded already (from the API)."""
        text = task_text(task) if isinstance(task, dict) else json.dumps(task, default=str)
        if not text.isascii() and not _encodable(text):  # it came as \\udXXX escapes: keep them so
            return cls(json.dumps(task, sort_keys=True, default=str), annotation_count(task), task, LONE_SURROGATE)
        return cls(text, annotation_count(task), task)

    def decoded(self) -> Any:
        if self.task is None:
            self.task = json.loads(self.text)
        return self.task


def store_tasks(session: Session, project: ProjectInfo, received: list[Received], users: dict[int, str],
                fields: TaskFields = TaskFields(), seen: set[int] | None = None,
                origin: str | None = None) -> SyncSummary:
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
    buckets = project.buckets
    by_hash: dict[str, Received] = {}
    for n, r in enumerate(received):
        if r.unusable is not None or r.count < 0:
            _quarantine_task(session, origin, f"task #{n + 1} of the batch", r.text,
                             r.unusable or "task is not an object with an annotations list", summary)
            continue
        summary.tasks += 1
        summary.annotations += r.count
        if seen is not None and r.count:
            seen.update(a["id"] for a in r.decoded()["annotations"]
                        if isinstance(a, dict) and isinstance(a.get("id"), int))
        if r.count:
            h = payload_hash(r.text)
            if h in by_hash:  # the very same task twice in one batch
                summary.unchanged += r.count
                continue
            by_hash[h] = r
    # A task stored exactly so before was fully handled then: skip it without decoding it.
    known = {h for h, src in lookup(session, RawRecord.__table__, ("payload_hash", "source"), "payload_hash",
                                    list(by_hash)) if src == TASK_SOURCE}
    summary.unchanged += sum(r.count for h, r in by_hash.items() if h in known)
    fresh_tasks = [r.decoded() for h, r in by_hash.items() if h not in known]
    if not fresh_tasks:
        return summary
    # Appended (COPY on Postgres): a race with another writer fails the transaction, which the
    # caller runs again (`in_transaction`), and so below.
    store_raw(session, TASK_SOURCE, origin, [(f"task {r.decoded().get('id')}", r.text)
                                             for h, r in by_hash.items() if h not in known], append=True)

    pending: list[tuple[dict, dict, str, str]] = []
    for task in fresh_tasks:
        shared = task_json(task)
        for ann in task["annotations"]:
            if not isinstance(ann, dict):
                ann = {"value": ann}
            pending.append((task, ann, f"task {task.get('id')} annotation {ann.get('id')}", payload(shared, ann)))

    # Stored before: already turned into a ranking or quarantined; nothing to do.
    hashes = {payload_hash(text): (task, ann, locator, text) for task, ann, locator, text in pending}
    known = {h for _, h, src in lookup(session, RawRecord.__table__, ("id", "payload_hash", "source"),
                                       "payload_hash", list(hashes)) if src == SOURCE}
    summary.unchanged += len(pending) - len(hashes) + len(known)
    fresh = {h: v for h, v in hashes.items() if h not in known}
    if not fresh:
        return summary
    raw = store_raw(session, SOURCE, origin, [(locator, text) for _, _, locator, text in fresh.values()],
                    append=True)

    entries: list[_Entry] = []
    reasons: dict[int, str] = {}
    invalid_ids: set[int] = set()
    item_cache: dict[int, TaskItems | Invalid] = {}
    for h, (task, ann, _, _) in fresh.items():
        entry = _Entry(task, ann, raw[h][0])
        try:
            aid = ann.get("id")
            if not isinstance(aid, int) or isinstance(aid, bool):
                raise Invalid("annotation has no integer id")
            entry.annotation_id = ls_id(aid, "annotation id")
            if task.get("id") is not None:
                ls_id(task.get("id"), "task id")
            key = id(task)
            if key not in item_cache:
                try:
                    item_cache[key] = task_items(task.get("data"), fields)
                except Invalid as exc:
                    item_cache[key] = exc
            if isinstance(item_cache[key], Invalid):
                raise item_cache[key]
            entry.items = item_cache[key]
            entry.annotator, entry.ls_user_id = _annotator(ann, users)
            entry.parsed = parse_annotation(ann, entry.items.ids, buckets)
        except Invalid as exc:
            reasons[entry.raw_id] = str(exc)
            _count_reason(summary, str(exc))
            if entry.annotation_id is not None:
                invalid_ids.add(entry.annotation_id)
            continue
        entries.append(entry)
    quarantine(session, reasons)
    entries = _newest_per_annotation(entries, summary)

    previous = _latest_versions(session, project.id, [e.annotation_id for e in entries] + sorted(invalid_ids))
    # An annotation edited into something unusable no longer says what its old ranking said.
    superseded = [previous[aid][0] for aid in invalid_ids if aid in previous and previous[aid][2] in LIVE]
    if entries:
        superseded += _write_rankings(session, project, entries, previous, summary)
    if superseded:
        now = utcnow()
        session.execute(update(Ranking), [{"id": rid, "status": RankingStatus.superseded.value, "updated_at": now}
                                          for rid in superseded])
    return summary


def _newest_per_annotation(entries: list[_Entry], summary: SyncSummary) -> list[_Entry]:
    """One entry per annotation id: a file may hold two states of one annotation; the newest wins."""
    newest: dict[int, _Entry] = {}
    for e in entries:
        other = newest.get(e.annotation_id)
        if other is None or str(e.annotation.get("updated_at") or "") >= str(other.annotation.get("updated_at") or ""):
            newest[e.annotation_id] = e
    summary.unchanged += len(entries) - len(newest)
    return list(newest.values())


def _latest_versions(session: Session, project_id: int, annotation_ids: list[int]) -> dict[int, tuple[int, int, str]]:
    """annotation id -> (ranking id, version, status) of its newest version in this project."""
    out: dict[int, tuple[int, int, str]] = {}
    query = (select(Ranking.id, Ranking.ls_annotation_id, Ranking.version, Ranking.status)
             .where(Ranking.ls_project_id == project_id, in_values(session, Ranking.ls_annotation_id, semi_join=True)))
    for part in chunks(sorted(set(annotation_ids)), IN_CHUNK):
        for rid, aid, version, status in session.execute(query, {"values": list(part)}):
            if aid not in out or version > out[aid][1]:
                out[aid] = (rid, version, status)
    return out


def _stored_tiers(session: Session, ranking_ids: list[int]) -> dict[int, tuple[tuple[int, ...], ...]]:
    tiers: dict[int, dict[int, list[int]]] = {rid: {} for rid in ranking_ids}
    for rid, cid, tier in lookup(session, RankingItem.__table__, ("ranking_id", "candidate_id", "tier"),
                                 "ranking_id", ranking_ids):
        if tier is not None:
            tiers[rid].setdefault(tier, []).append(cid)
    return {rid: _tiers_key((t, by_tier[t]) for t in sorted(by_tier)) for rid, by_tier in tiers.items()}


def _write_rankings(session: Session, project: ProjectInfo, entries: list[_Entry],
                    previous: dict[int, tuple[int, int, str]], summary: SyncSummary) -> list[int]:
    """Insert the rankings of parsed annotations; returns the ids of the versions they supersede."""
    prompt_ids = ensure_prompts(session, {content_hash(e.items.prompt): {"text": e.items.prompt, "source": SOURCE}
                                          for e in entries}, append=True)
    candidates = {}
    for e in entries:
        pid = prompt_ids[content_hash(e.items.prompt)]
        for text in e.items.texts:
            candidates.setdefault((pid, content_hash(text)), {"text": text})
    candidate_ids = ensure_candidates(session, candidates, append=True)
    annotator_ids = ensure_annotators(session, {e.annotator: {"ls_user_id": e.ls_user_id} for e in entries})

    stored = _stored_tiers(session, [previous[e.annotation_id][0] for e in entries if e.annotation_id in previous])
    superseded: list[int] = []
    rows, items_per_row = [], []
    for e in sorted(entries, key=lambda e: e.annotation_id):
        pid = prompt_ids[content_hash(e.items.prompt)]
        cid_of = {iid: candidate_ids[(pid, content_hash(text))] for iid, text in zip(e.items.ids, e.items.texts)}
        tiers = [[cid_of[i] for i in tier] for tier in e.parsed.tiers]
        positions = e.parsed.tier_positions()
        status = RankingStatus.skipped.value if e.parsed.skipped else RankingStatus.valid.value
        version = 1
        if e.annotation_id in previous:
            old_id, old_version, old_status = previous[e.annotation_id]
            old_skipped = old_status == RankingStatus.skipped.value
            if stored.get(old_id) == _tiers_key(zip(positions, tiers)) and old_skipped == e.parsed.skipped:
                summary.unchanged += 1  # e.g. the same annotation read from an export and from the API
                continue
            version = old_version + 1
            if old_status in LIVE:
                superseded.append(old_id)
            summary.updated += 1
        else:
            summary.new += 1
        flag = same_as_shown(e.parsed, e.items.ids)
        rows.append({
            "prompt_id": pid, "annotator_id": annotator_ids[e.annotator], "source": SOURCE,
            "external_id": f"{project.id}:{e.annotation_id}", "version": version, "status": status,
            "n_tiers": len(tiers), "same_as_shown": flag, "raw_record_id": e.raw_id,
            "ls_project_id": project.id, "ls_task_id": e.task.get("id"), "ls_annotation_id": e.annotation_id,
            "lead_time": _lead_time(e.annotation),
        })
        tier_of = {cid: position for position, tier in zip(positions, tiers) for cid in tier}
        items_per_row.append([{"candidate_id": cid, "tier": tier_of.get(cid), "shown_position": pos}
                              for pos, cid in enumerate(cid_of[i] for i in e.items.ids)])
    if not rows:
        return superseded
    ids = append_rows(session, Ranking.__table__, rows)
    append_rows(session, RankingItem.__table__,
                [dict(item, ranking_id=rid) for rid, items in zip(ids, items_per_row) for item in items], new_ids=False)
    return superseded
