"""`ls import`: annotations from a Label Studio JSON or JSON_MIN export file, with no server.

The file (plain or compressed) is streamed a batch of tasks at a time, so memory
stays flat however large the export is; each batch is one transaction through the
same code as `ls sync`. Works for projects preflab did not create: prompts and
candidates are taken from the task data. An export ranking with buckets is
imported only when their order is known (--buckets, --label-config, or the config
of a project preflab syncs): the order Label Studio writes them in is not the
order of the tiers.

An export of tasks preflab pushed is the project they were pushed to, whatever
server URL or --project the import is given: its tasks say so (the `preflab_task`
key push puts in their data, with their Label Studio ids), so its annotations are
the ones `ls sync` stored, and importing it after a sync adds nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import LSProject, LSTask
from preflab.db.store import shown_payload
from preflab.db.transactions import in_transaction
from preflab.errors import InputError
from preflab.labelling.studio.annotations import SyncSummary, project_state, store_tasks
from preflab.labelling.studio.export_reader import (
    BrokenExport,
    JsonMinTask,
    Unusable,
    buckets_used,
    iter_tasks,
    shown_names,
)
from preflab.labelling.studio.parse import KEY_FIELD, MAX_ID, TaskFields
from preflab.labelling.studio.projects import CUSTOM, EXPORT_BASE_URL, ProjectInfo, ensure_project, info
from preflab.labelling.studio.received import Received, annotation_count

BATCH_TASKS = 500
# How far into a file to look for tasks preflab pushed: an export of them has them throughout.
LOOK_AT_TASKS, ENOUGH_KEYS = 1000, 50


def batches(tasks: Iterator[Any], size: int) -> Iterator[list[Any]]:
    """Lists of `size` tasks; a file that breaks part-way still gives the tasks read before the break."""
    batch: list[Any] = []
    try:
        for task in tasks:
            batch.append(task)
            if len(batch) >= size:
                yield batch
                batch = []
    except InputError:
        if batch:
            yield batch
        raise
    if batch:
        yield batch


def _keys(path: Path) -> dict[int, tuple[int, str]]:
    """Label Studio task id -> (prompt id, candidate set hash) of the first tasks that carry preflab's key."""
    found: dict[int, tuple[int, str]] = {}
    try:
        for _, task in itertools.islice(iter_tasks(path), LOOK_AT_TASKS):
            if not isinstance(task, dict):
                continue
            data, tid = task.get("data"), task.get("id")
            key = data.get(KEY_FIELD) if isinstance(data, dict) else None
            if isinstance(key, str) and key.count(":") == 1 and isinstance(tid, int) and 0 < tid <= MAX_ID:
                prompt, h = key.split(":")
                if prompt.isdigit() and len(h) == 64:
                    found[tid] = (int(prompt), h)
                    if len(found) >= ENOUGH_KEYS:
                        break
    except BrokenExport:
        pass
    return found


def pushed_project(session: Session, path: Path) -> ProjectInfo | None:
    """The project preflab pushed the file's tasks to (their ids and keys match its tasks); None if none."""
    keys = _keys(path)
    if not keys:
        return None
    rows = session.execute(
        select(LSTask.project_id, LSTask.task_id, LSTask.prompt_id, LSTask.candidate_set_hash).where(
            LSTask.task_id.in_(keys)
        )
    )
    projects = {project for project, tid, prompt, h in rows if keys[tid] == (prompt, h)}
    if len(projects) != 1:  # none, or tasks of several projects (of several servers): do not guess
        return None
    return info(session.get(LSProject, projects.pop()))


def import_export(
    sessions: sessionmaker[Session],
    path: str | Path,
    *,
    base_url: str | None = None,
    project_id: int | None = None,
    fields: TaskFields = TaskFields(),
    buckets: list[str] | None = None,
    label_config: str | None = None,
    title: str | None = None,
    batch_tasks: int = BATCH_TASKS,
    reporter: Reporter = SILENT,
) -> tuple[ProjectInfo | None, SyncSummary]:
    """The `ls import` job: every annotation of an export file, a batch of tasks per transaction.

    Returns the project (None for a file with no task) and a summary.

    Args:
        base_url, project_id: the project the export came from. The project id
            defaults to the tasks' `project` field; the server, to "file:" (no server).
            A project preflab created (same URL and id) shares its rankings with `ls sync`,
            as does an export of tasks preflab pushed, whatever these say.
        buckets: the tiers of a bucket ranking, best first, when the project's
            labelling config is not known (else taken from `label_config` or the project).
    """
    path = Path(path)
    # Stop before writing anything rather than guess which bucket is the best tier.
    used = [] if buckets or label_config else buckets_used(path)
    # Each task is decoded to find where it ends and count its annotations, then dropped:
    # only new tasks are decoded again (a re-sync keeps no decoded tasks alive). JSON_MIN
    # records are kept decoded: each is turned into the task it flattens.
    tasks = ((text, task, annotation_count(task)) for text, task in iter_tasks(path))
    try:
        first = next(tasks, None)
    except BrokenExport as exc:  # the very first task cannot be read
        raise InputError(exc.sentence(0)) from None
    if first is None:
        return None, SyncSummary()
    with sessions.begin() as session:
        pushed = pushed_project(session, path)
    if pushed is not None and project_id not in (None, pushed.project_id):
        raise InputError(
            f"the tasks in {path} are those preflab pushed to project {pushed.project_id} at "
            f"{pushed.base_url}, not project {project_id}: leave out --project"
        )
    if project_id is None:
        found = first[1].get("project") if isinstance(first[1], dict) else None
        project_id = found if isinstance(found, int) and 0 < found <= MAX_ID else 0

    def find_or_record(session: Session) -> ProjectInfo:
        project = pushed or ensure_project(
            session,
            (base_url or EXPORT_BASE_URL).rstrip("/"),
            project_id,
            title=title or shown_payload(os.fsencode(path.stem))[:300],
            template=CUSTOM,
            label_config=label_config or "",
        )
        if used and not project.buckets:  # raised inside the transaction: the project row is not kept
            raise InputError(
                f"{path} ranks with buckets ({shown_names(used)}), and only the project's "
                f"labelling config says which is the best tier: pass --buckets with them "
                f"best first, or --label-config with the project's XML"
            )
        return project

    project = in_transaction(sessions, find_or_record)
    if buckets:  # the caller knows better than a config the project may not have
        project = dataclasses.replace(project, bucket_order=tuple(buckets))
    total = SyncSummary()
    # A file name is bytes: those that are not UTF-8 would reach the database as lone surrogates.
    origin = shown_payload(os.fsencode(path.resolve()))[-500:]
    received = (
        Received(text, count, task if isinstance(task, JsonMinTask) else None)
        if not isinstance(task, Unusable)
        else Received(text, 0, unusable=task.reason)
        for text, task, count in itertools.chain([first], tasks)
    )
    stored = 0
    try:
        with reporter.progress("importing tasks") as advance:
            for batch in batches(received, batch_tasks):
                total.add(
                    in_transaction(
                        sessions,
                        lambda session: store_tasks(session, project, batch, users={}, fields=fields, origin=origin),  # noqa: B023 (called within this iteration)
                    )
                )
                stored += len(batch)
                advance(len(batch))
    except BrokenExport as exc:
        raise InputError(exc.sentence(stored)) from None
    with sessions.begin() as session:
        project_state(session, project, total)
    return project, total
