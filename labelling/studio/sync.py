"""`ls sync`: pull a Label Studio project's annotations from the server, a page per transaction."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter, plural
from preflab.db.models import LSProject, Ranking, RankingStatus, utcnow
from preflab.db.store import chunks
from preflab.db.transactions import in_transaction
from preflab.errors import LabelStudioError
from preflab.labelling.studio.annotations import SyncSummary, project_state, store_tasks
from preflab.labelling.studio.client import LabelStudioClient
from preflab.labelling.studio.parse import TaskFields
from preflab.labelling.studio.projects import ProjectInfo, ensure_project, find_project
from preflab.labelling.studio.received import Received
from preflab.labelling.studio.versions import LIVE, SOURCE


def _live(project: ProjectInfo, *where):
    """The live rankings (valid or skipped) of a project's annotations: (ranking id, annotation id)."""
    return select(Ranking.id, Ranking.ls_annotation_id).where(
        Ranking.ls_project_id == project.id, Ranking.source == SOURCE, Ranking.status.in_(LIVE), *where
    )


def _set_deleted(session: Session, gone: dict[int, list[int]]) -> int:
    """Mark the live rankings of each annotation gone (annotation id -> its ranking ids, one per criterion it
    answered) as deleted; returns how many annotations."""
    ranking_ids = [rid for rids in gone.values() for rid in rids]
    if ranking_ids:
        now = utcnow()
        session.execute(
            update(Ranking),
            [{"id": rid, "status": RankingStatus.deleted.value, "updated_at": now} for rid in ranking_ids],
        )
    return len(gone)


def mark_deleted(session: Session, project: ProjectInfo, seen: set[int], exists) -> int:
    """Mark the rankings of annotations no longer in Label Studio as deleted; returns how many annotations.

    `exists(annotation_id)` asks the server once more about each missing one, so
    an annotation that moved between pages while they were read is not lost.
    """
    missing: dict[int, list[int]] = {}
    for rid, aid in session.execute(_live(project)):
        if aid not in seen:
            missing.setdefault(aid, []).append(rid)
    return _set_deleted(session, {aid: rids for aid, rids in missing.items() if not exists(aid)})


def delete_annotations(session: Session, project: ProjectInfo, annotation_ids: Collection[int]) -> int:
    """Mark the rankings of annotations Label Studio says it deleted (a webhook) as deleted; returns how many
    annotations had live rankings."""
    gone: dict[int, list[int]] = {}
    for part in chunks(sorted(set(annotation_ids))):
        for rid, aid in session.execute(_live(project, Ranking.ls_annotation_id.in_(part))):
            gone.setdefault(aid, []).append(rid)
    return _set_deleted(session, gone)


def sync_project(
    sessions: sessionmaker[Session],
    client: LabelStudioClient,
    project_id: int | None,
    *,
    fields: TaskFields = TaskFields(),
    page_size: int = 100,
    reporter: Reporter = SILENT,
) -> tuple[ProjectInfo, SyncSummary]:
    """The `ls sync` job: pull every annotation of a Label Studio project, a page per transaction.

    Also works for a project preflab did not create (it is recorded on first
    sync). Annotations gone from the server are marked deleted once every page
    has been read.
    """
    if project_id is None:
        with sessions.begin() as session:
            project_id = find_project(session, client.base_url, None).project_id
    remote = client.get_project(project_id)  # fails before anything is written
    users = client.users()
    # Each transaction may lose a race with another sync of the project (the same new
    # annotation, a deadlock): it is then run again, and finds what the other wrote.
    project = in_transaction(
        sessions,
        lambda session: ensure_project(
            session,
            client.base_url,
            project_id,
            title=remote.title or f"project {project_id}",
            label_config=remote.label_config or "",
        ),
    )
    total, seen, pages = SyncSummary(), set(), 0

    def finish(session: Session) -> None:
        total.deleted = mark_deleted(session, project, seen, client.annotation_exists)
        session.get(LSProject, project.id).synced_at = utcnow()
        project_state(session, project, total)

    try:
        with reporter.progress("syncing tasks") as advance:
            for page in client.iter_task_pages(project_id, page_size=page_size):
                received = [Received.of(task) for task in page]
                total.add(
                    in_transaction(
                        sessions,
                        lambda session: store_tasks(session, project, received, users, fields, seen),  # noqa: B023 (called within this iteration)
                    )
                )
                pages += 1
                advance(len(page))
        in_transaction(sessions, finish)  # asks the server about annotations that seem gone
    except LabelStudioError as exc:
        if not pages:
            raise
        # Each page was committed whole: say what is kept, and that syncing again finishes.
        stored, said = total.new + total.updated, str(exc)
        raise LabelStudioError(
            f"{said}{' ' if said.endswith('?') else '; '}{plural(stored, 'ranking')} from "
            f"{plural(pages, 'page')} {'was' if stored == 1 else 'were'} stored; "
            f"run `preflab ls sync` again to finish"
        ) from None
    return project, total
