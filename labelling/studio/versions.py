"""Parsed Label Studio annotations → rankings: versions, the person behind each, the rows written.

An annotation has one identity however it arrives (sync, an export file of any
type): its Label Studio id within the project, and its task. A new annotation
becomes version 1; an edited one supersedes its previous version unless its
ranking did not change. An annotation id met on another task than the one it was
stored from is quarantined: it is not an edit that moves a ranking to another
prompt. The annotator is the person of the Label Studio user, whatever name the
source gives them (an email, or only the user id), and is created only for a
ranking that is written.

An annotation of a template with criteria holds a ranking per criterion
(`results.py`): each is versioned on its own, keyed by the annotation id and its
criterion. A criterion the annotation answered before and answers no more (its
ranker emptied) has its old ranking superseded; one never answered has none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from preflab.db.bulk import IN_CHUNK, append_rows, in_values, lookup
from preflab.db.conversation import prompt_columns, reply_columns
from preflab.db.models import Annotator, AnnotatorKind, Ranking, RankingItem, RankingStatus, utcnow
from preflab.db.store import chunks, ensure_annotators, ensure_candidates, ensure_criteria, ensure_prompts
from preflab.labelling.studio.parse import TaskItems
from preflab.labelling.studio.projects import ProjectInfo, same_server
from preflab.labelling.studio.results import Parsed, same_as_shown
from preflab.templates.criteria import DESCRIPTIONS

SOURCE = "label-studio"  # raw records of annotations, and the rankings made from them
LIVE = (RankingStatus.valid.value, RankingStatus.skipped.value)


@dataclass
class Entry:
    """One parsed annotation, on its way to a ranking."""

    task: dict
    annotation: dict
    raw_id: int
    annotation_id: int
    items: TaskItems
    rankings: tuple[Parsed, ...]  # one per criterion answered (or skipped)
    annotator: tuple[str, str]  # (kind, name) when the person is not known yet
    ls_user_id: int | None = None

    @property
    def task_id(self) -> int | None:
        return self.task.get("id")


@dataclass(frozen=True)
class Previous:
    """The newest stored version of an annotation."""

    ranking_id: int
    version: int
    status: str
    task_id: int | None
    annotator_id: int


@dataclass
class Written:
    """What became of the entries: counted as the sync summary counts them, and those to quarantine."""

    new: int = 0
    updated: int = 0
    unchanged: int = 0
    moved: dict[int, str] = field(default_factory=dict)  # raw record id -> why: the annotation is on another task


def _tiers_key(tiers: Iterable[tuple[int, Iterable[int]]]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(position, candidate ids) per tier: moving a tier to another bucket is a change too."""
    return tuple((position, tuple(sorted(t))) for position, t in tiers)


def _moved(aid: int, first: int | None, here: int | None) -> str:
    return (
        f"annotation {aid} was stored from task {first}, and here it is on task {here}: an annotation "
        f"does not move to another task (is this export from another Label Studio server?)"
    )


def _one_task_each(entries: list[Entry], written: Written) -> list[Entry]:
    """One entry per annotation id: the newest state of it; the same id on a second task is quarantined."""
    newest: dict[int, Entry] = {}
    for e in entries:
        other = newest.get(e.annotation_id)
        if other is not None and other.task_id != e.task_id:
            written.moved[e.raw_id] = _moved(e.annotation_id, other.task_id, e.task_id)
        elif other is None or str(e.annotation.get("updated_at") or "") >= str(
            other.annotation.get("updated_at") or ""
        ):
            newest[e.annotation_id] = e
    written.unchanged += len(entries) - len(newest) - len(written.moved)
    return list(newest.values())


def criterion_versions(session: Session, project_id: int, annotation_ids: list[int]) -> dict[tuple[int, str], Previous]:
    """(annotation id, criterion) -> the newest stored version of that annotation's ranking by that criterion."""
    out: dict[tuple[int, str], Previous] = {}
    query = select(
        Ranking.id,
        Ranking.ls_annotation_id,
        Ranking.criterion,
        Ranking.version,
        Ranking.status,
        Ranking.ls_task_id,
        Ranking.annotator_id,
    ).where(Ranking.ls_project_id == project_id, in_values(session, Ranking.ls_annotation_id, semi_join=True))
    for part in chunks(sorted(set(annotation_ids)), IN_CHUNK):
        for rid, aid, criterion, version, status, task_id, annotator_id in session.execute(
            query, {"values": list(part)}
        ):
            key = (aid, criterion)
            if key not in out or version > out[key].version:
                out[key] = Previous(rid, version, status, task_id, annotator_id)
    return out


def _newest(by_criterion: dict[tuple[int, str], Previous]) -> dict[int, Previous]:
    """annotation id -> the version written last among its criteria'."""
    out: dict[int, Previous] = {}
    for (aid, _), p in by_criterion.items():
        if aid not in out or p.ranking_id > out[aid].ranking_id:
            out[aid] = p
    return out


def latest_versions(session: Session, project_id: int, annotation_ids: list[int]) -> dict[int, Previous]:
    """annotation id -> its newest stored version in this project (the one written last, whatever its criterion)."""
    return _newest(criterion_versions(session, project_id, annotation_ids))


def _stored_tiers(session: Session, ranking_ids: list[int]) -> dict[int, tuple[tuple[int, ...], ...]]:
    tiers: dict[int, dict[int, list[int]]] = {rid: {} for rid in ranking_ids}
    for rid, cid, tier in lookup(
        session, RankingItem.__table__, ("ranking_id", "candidate_id", "tier"), "ranking_id", ranking_ids
    ):
        if tier is not None:
            tiers[rid].setdefault(tier, []).append(cid)
    return {rid: _tiers_key((t, by_tier[t]) for t in sorted(by_tier)) for rid, by_tier in tiers.items()}


def _people(session: Session, project: ProjectInfo, entries: list[Entry]) -> dict[int, int]:
    """Label Studio user id -> annotator id, for the users who ranked before in a project of this server.

    So a user is one person whether a source names them by email (sync, an
    export that expands users) or only by id (most exports, JSON_MIN).
    """
    users = {e.ls_user_id for e in entries if e.ls_user_id is not None}
    if not users:
        return {}
    projects = same_server(session, project)
    ranked_here = exists().where(
        Ranking.annotator_id == Annotator.id, Ranking.source == SOURCE, Ranking.ls_project_id.in_(projects)
    )
    rows = session.execute(
        select(Annotator.ls_user_id, Annotator.id)
        .where(Annotator.kind == AnnotatorKind.human.value, Annotator.ls_user_id.in_(users), ranked_here)
        .order_by(Annotator.id)
    )
    out: dict[int, int] = {}
    for user, annotator_id in rows:
        out.setdefault(user, annotator_id)
    return out


def _annotator_ids(
    session: Session, project: ProjectInfo, entries: list[Entry], previous: dict[int, Previous]
) -> dict[int, int]:
    """annotation id -> annotator id: its earlier version's, the user's known person, or one found by name."""
    out = {e.annotation_id: previous[e.annotation_id].annotator_id for e in entries if e.annotation_id in previous}
    fresh = [e for e in entries if e.annotation_id not in out]
    known = _people(session, project, fresh)
    named = [e for e in fresh if e.ls_user_id not in known]
    ids = ensure_annotators(session, {e.annotator: {"ls_user_id": e.ls_user_id} for e in named})
    # A person first met elsewhere (an import by email) gains their Label Studio user id.
    users = {ids[e.annotator]: e.ls_user_id for e in named if e.ls_user_id is not None}
    for annotator_id, user in users.items():
        session.execute(
            update(Annotator)
            .where(Annotator.id == annotator_id, Annotator.ls_user_id.is_(None))
            .values(ls_user_id=user),
            execution_options={"synchronize_session": False},
        )
    out.update({e.annotation_id: known[e.ls_user_id] for e in fresh if e.ls_user_id in known})
    out.update({e.annotation_id: ids[e.annotator] for e in named})
    return out


def _same_task(before: Previous, task_id: int | None) -> bool:
    return None in (before.task_id, task_id) or before.task_id == task_id


def write_rankings(
    session: Session, project: ProjectInfo, entries: list[Entry], invalid: dict[int, int | None]
) -> Written:
    """Insert the rankings of parsed annotations and supersede what they replace, in the caller's transaction.

    `invalid`: annotation id -> task id of the annotations read in this batch that
    could not be used; their earlier versions no longer say what the annotation
    says, and are superseded.
    """
    written = Written()
    entries = _one_task_each(entries, written)
    by_criterion = criterion_versions(session, project.id, [e.annotation_id for e in entries] + sorted(invalid))
    previous = _newest(by_criterion)
    # An annotation edited into something unusable no longer says what its old rankings said.
    superseded = [
        p.ranking_id
        for (aid, _), p in by_criterion.items()
        if aid in invalid and p.status in LIVE and _same_task(p, invalid[aid])
    ]
    kept = []
    for e in entries:
        before = previous.get(e.annotation_id)
        if before is not None and not _same_task(before, e.task_id):
            written.moved[e.raw_id] = _moved(e.annotation_id, before.task_id, e.task_id)
        else:
            kept.append(e)
    if kept:
        superseded += _write(session, project, kept, by_criterion, written)
    if superseded:
        session.execute(
            update(Ranking),
            [{"id": rid, "status": RankingStatus.superseded.value, "updated_at": utcnow()} for rid in superseded],
        )
    return written


def _write(
    session: Session,
    project: ProjectInfo,
    entries: list[Entry],
    by_criterion: dict[tuple[int, str], Previous],
    written: Written,
) -> list[int]:
    """Insert the rankings that are new or changed; returns the ids of the versions they supersede."""
    # Keyed by the conversation hashes (`preflab.db.conversation`): a plain prompt or reply keeps its old hash.
    prompt_ids = ensure_prompts(
        session,
        {e.items.prompt_key: {**prompt_columns(e.items.prompt), "source": SOURCE} for e in entries},
        append=True,
    )
    candidates = {}
    for e in entries:
        pid = prompt_ids[e.items.prompt_key]
        for turns, key in zip(e.items.replies, e.items.reply_keys):
            candidates.setdefault((pid, key), reply_columns(turns))
    candidate_ids = ensure_candidates(session, candidates, append=True)
    aids = {e.annotation_id for e in entries}
    mine = {key: p for key, p in by_criterion.items() if key[0] in aids}
    stored = _stored_tiers(session, [p.ranking_id for p in mine.values()])
    superseded: list[int] = []
    rows: list[tuple[Entry, dict, list[dict]]] = []
    for e in sorted(entries, key=lambda e: e.annotation_id):
        pid = prompt_ids[e.items.prompt_key]
        cid_of = {iid: candidate_ids[(pid, key)] for iid, key in zip(e.items.ids, e.items.reply_keys)}
        answered = {parsed.criterion for parsed in e.rankings}
        # A criterion answered before and not now (its ranker emptied): its old ranking no longer holds.
        dropped = [
            p.ranking_id
            for (aid, criterion), p in mine.items()
            if aid == e.annotation_id and criterion not in answered and p.status in LIVE
        ]
        superseded += dropped
        changed = bool(dropped)
        for parsed in e.rankings:
            tiers = [[cid_of[i] for i in tier] for tier in parsed.tiers]
            positions = parsed.tier_positions()
            version = 1
            before = mine.get((e.annotation_id, parsed.criterion))
            if before is not None:
                old_skipped = before.status == RankingStatus.skipped.value
                if stored.get(before.ranking_id) == _tiers_key(zip(positions, tiers)) and old_skipped == parsed.skipped:
                    continue  # e.g. the same annotation read from an export and from the API
                version = before.version + 1
                if before.status in LIVE:
                    superseded.append(before.ranking_id)
            changed = True
            row = _ranking_row(project, e, parsed, pid, version, tiers, positions)
            rows.append((e, row, _items(e, cid_of, tiers, positions)))
        if not any(aid == e.annotation_id for aid, _ in mine):
            written.new += 1
        elif changed:
            written.updated += 1
        else:
            written.unchanged += 1
    if not rows:
        return superseded
    # Only now: a person is created for a ranking that is written, never for one read again.
    annotator_of = _annotator_ids(session, project, list({id(e): e for e, _, _ in rows}.values()), _newest(mine))
    ensure_criteria(
        session,
        {row["criterion"] for _, row, _ in rows},
        {row["criterion"]: DESCRIPTIONS[row["criterion"]] for _, row, _ in rows if row["criterion"] in DESCRIPTIONS},
    )
    ids = append_rows(
        session, Ranking.__table__, [dict(row, annotator_id=annotator_of[e.annotation_id]) for e, row, _ in rows]
    )
    append_rows(
        session,
        RankingItem.__table__,
        [dict(item, ranking_id=rid) for rid, (_, _, items) in zip(ids, rows) for item in items],
        new_ids=False,
    )
    return superseded


def _ranking_row(
    project: ProjectInfo, e: Entry, parsed: Parsed, prompt_id: int, version: int, tiers: list, positions
) -> dict:
    return {
        "prompt_id": prompt_id,
        "source": SOURCE,
        "external_id": f"{project.id}:{e.annotation_id}",
        "version": version,
        "criterion": parsed.criterion,
        "n_tiers": len(tiers),
        "same_as_shown": same_as_shown(parsed, e.items.ids),
        "status": RankingStatus.skipped.value if parsed.skipped else RankingStatus.valid.value,
        "raw_record_id": e.raw_id,
        "ls_project_id": project.id,
        "ls_task_id": e.task_id,
        "ls_annotation_id": e.annotation_id,
        "lead_time": _lead_time(e.annotation),
    }


def _items(e: Entry, cid_of: dict[str, int], tiers: list, positions) -> list[dict]:
    tier_of = {cid: position for position, tier in zip(positions, tiers) for cid in tier}
    return [
        {"candidate_id": cid, "tier": tier_of.get(cid), "shown_position": pos}
        for pos, cid in enumerate(cid_of[i] for i in e.items.ids)
    ]


def _lead_time(annotation: dict) -> float | None:
    """Seconds Label Studio says the annotator spent (`lead_time`); None when absent or not a sane number."""
    value = annotation.get("lead_time")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < 1e9 else None  # NaN and infinities fail the comparison
