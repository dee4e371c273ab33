"""`ls import`: annotations from a Label Studio JSON export file, with no server.

The file (a JSON list of tasks) is streamed a batch of tasks at a time, so
memory stays flat however large the export is; each batch is one transaction
through the same code as `ls sync`. Works for projects preflab did
not create: prompts and candidates are taken from the task data.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.errors import InputError
from preflab.labelling.studio.parse import TaskFields
from preflab.labelling.studio.projects import CUSTOM, EXPORT_BASE_URL, ProjectInfo, ensure_project
from preflab.labelling.studio.annotations import Received, SyncSummary, annotation_count, store_tasks

BATCH_TASKS = 500
CHUNK = 1 << 20  # characters read at a time
MAX_TASK = 64 << 20  # a task larger than this is taken for a broken file


def iter_tasks(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Each task of a Label Studio JSON export as (its JSON text as written, the parsed task), streamed.

    The file is read a megabyte at a time and each task is decoded on its own by
    the json module's C decoder, so memory holds one chunk and one task, and the
    text of each task is kept exactly as it was written (its raw record).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} is not a file")
    decoder = json.JSONDecoder()
    n = 0
    with path.open(encoding="utf-8-sig", errors="surrogateescape") as handle:
        buffer, pos, eof = handle.read(CHUNK), 0, False

        def skip_space(buffer: str, pos: int) -> tuple[str, int]:
            nonlocal eof
            while True:
                while pos < len(buffer) and buffer[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buffer) or eof:
                    return buffer, pos
                more = handle.read(CHUNK)
                eof = not more
                buffer, pos = buffer[pos:] + more, 0

        buffer, pos = skip_space(buffer, pos)
        if buffer[pos:pos + 1] != "[":
            raise InputError(f"{path} is not a Label Studio JSON export (expected a JSON list of tasks)")
        pos += 1
        while True:
            buffer, pos = skip_space(buffer, pos)
            if buffer[pos:pos + 1] == "]":
                return
            if n and buffer[pos:pos + 1] == ",":
                buffer, pos = skip_space(buffer, pos + 1)
            try:
                task, end = decoder.raw_decode(buffer, pos)
            except json.JSONDecodeError as exc:
                # Most often the task runs past the chunk read so far: read on and try again.
                if eof or len(buffer) - pos > MAX_TASK:
                    raise InputError(f"{path} is not valid JSON after task {n:,} ({exc.msg}); "
                                     f"the tasks before it were imported") from None
                more = handle.read(CHUNK)
                eof = not more
                buffer, pos = buffer[pos:] + more, 0
                continue
            n += 1
            yield buffer[pos:end], task
            pos = end
            if pos > CHUNK:  # drop what was read, keep the buffer small
                buffer, pos = buffer[pos:], 0


def batches(tasks: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while True:
        batch = list(itertools.islice(tasks, size))
        if not batch:
            return
        yield batch


def import_export(sessions: sessionmaker[Session], path: str | Path, *, base_url: str | None = None,
                  project_id: int | None = None, fields: TaskFields = TaskFields(),
                  buckets: list[str] | None = None, label_config: str | None = None, title: str | None = None,
                  batch_tasks: int = BATCH_TASKS, reporter: Reporter = SILENT
                  ) -> tuple[ProjectInfo | None, SyncSummary]:
    """The `ls import` job: every annotation of an export file, a batch of tasks per transaction.

    Returns the project (None for a file with no task) and a summary.

    Args:
        base_url, project_id: the project the export came from. The project id
            defaults to the tasks' `project` field; the server, to "file:" (no server).
            A project preflab created (same URL and id) shares its rankings with `ls sync`.
        buckets: the tiers of a bucket ranking, best first, when the project's
            labelling config is not known (else taken from `label_config` or the project).
    """
    path = Path(path)
    # Each task is decoded to find where it ends and count its annotations, then dropped:
    # only new tasks are decoded again (a re-sync keeps no decoded tasks alive).
    tasks = ((text, task, annotation_count(task)) for text, task in iter_tasks(path))
    first = next(tasks, None)
    if first is None:
        return None, SyncSummary()
    if project_id is None:
        found = first[1].get("project") if isinstance(first[1], dict) else None
        project_id = found if isinstance(found, int) else 0
    with sessions.begin() as session:
        project = ensure_project(session, (base_url or EXPORT_BASE_URL).rstrip("/"), project_id,
                                 title=title or path.stem, template=CUSTOM, label_config=label_config or "")
    if buckets:  # the caller knows better than a config the project may not have
        project = dataclasses.replace(project, bucket_order=tuple(buckets))
    total = SyncSummary()
    origin = str(path.resolve())
    received = (Received(text, count) for text, _, count in itertools.chain([first], tasks))
    with reporter.progress("importing tasks") as advance:
        for batch in batches(received, batch_tasks):
            with sessions.begin() as session:
                total.add(store_tasks(session, project, batch, users={}, fields=fields, origin=origin))
            advance(len(batch))
    return project, total

