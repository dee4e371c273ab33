"""`ls import`: annotations from a Label Studio JSON export file, with no server.

The file (a JSON list of tasks, plain or compressed) is streamed a batch of
tasks at a time, so memory stays flat however large the export is; each batch
is one transaction through the same code as `ls sync`. Works for projects
preflab did not create: prompts and candidates are taken from the task data.
An export ranking with buckets is imported only when their order is known
(--buckets, --label-config, or the config of a project preflab syncs): the
order Label Studio writes them in is not the order of the tiers.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.engine import in_transaction
from preflab.db.lines import open_input
from preflab.errors import InputError
from preflab.labelling.studio.parse import MAX_ID, TaskFields, bucket_keys
from preflab.labelling.studio.projects import CUSTOM, EXPORT_BASE_URL, ProjectInfo, ensure_project
from preflab.labelling.studio.annotations import LONE_SURROGATE, Received, SyncSummary, annotation_count, \
    project_state, store_tasks

BATCH_TASKS = 500
CHUNK = 1 << 20  # characters read at a time
MAX_TASK = 64 << 20  # a task larger than this is taken for a broken file


@dataclass(frozen=True)
class Unusable:
    """A task that was read whole but cannot be used at all: it is quarantined with this reason."""

    reason: str


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _unusable(text: str, constants: list[str], task: Any) -> Unusable | None:
    if constants:
        return Unusable(f"holds {constants[0]}, which JSON does not allow (write null or a number)")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # read with surrogateescape: the byte that was not UTF-8
            return Unusable(f"not valid UTF-8 (byte 0x{ord(text[exc.start]) - 0xDC00:02x} "
                            f"at offset {len(text[:exc.start].encode('utf-8', 'surrogateescape'))} of the task)")
    if _SURROGATE_ESCAPE.search(text):  # a pair is text; one half alone decodes to what UTF-8 cannot hold
        try:
            json.dumps(task, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return Unusable(LONE_SURROGATE)
    return None


def iter_tasks(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Each task of a Label Studio JSON export as (its JSON text as written, the parsed task), streamed.

    The file (plain or gzip/bzip2/xz-compressed) is read a megabyte at a time and
    each task is decoded on its own by the json module's C decoder, so memory holds
    one chunk and one task, and the text of each task is kept exactly as it was
    written (its raw record). A task that is not UTF-8, or holds NaN or Infinity,
    comes as `Unusable` in place of the parsed task.
    """
    path = Path(path)
    constants: list[str] = []
    decoder = json.JSONDecoder(parse_constant=lambda name: constants.append(name))
    n = 0
    with io.TextIOWrapper(open_input(path), encoding="utf-8-sig", errors="surrogateescape") as handle:
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
            constants.clear()
            try:
                task, end = decoder.raw_decode(buffer, pos)
            except RecursionError:
                raise InputError(f"{path}: task {n + 1:,} is nested too deeply to be read; "
                                 f"the tasks before it are stored") from None
            except json.JSONDecodeError as exc:
                # Most often the task runs past the chunk read so far: read on and try again.
                if eof or len(buffer) - pos > MAX_TASK:
                    raise InputError(f"{path} is not valid JSON after task {n:,} ({exc.msg}); "
                                     f"the tasks before it are stored") from None
                more = handle.read(CHUNK)
                eof = not more
                buffer, pos = buffer[pos:] + more, 0
                continue
            n += 1
            text = buffer[pos:end]
            yield text, _unusable(text, constants, task) or task
            pos = end
            if pos > CHUNK:  # drop what was read, keep the buffer small
                buffer, pos = buffer[pos:], 0


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


def buckets_used(path: str | Path) -> list[str]:
    """The names of the buckets the annotations of an export rank with, in the order first met."""
    found: dict[str, None] = {}
    for _, task in iter_tasks(path):
        annotations = task.get("annotations") if isinstance(task, dict) else None
        for annotation in annotations if isinstance(annotations, list) else []:
            result = annotation.get("result") if isinstance(annotation, dict) else None
            for entry in result if isinstance(result, list) else []:
                value = entry.get("value") if isinstance(entry, dict) else None
                names = bucket_keys(value.get("ranker")) if isinstance(value, dict) else None
                found.update(dict.fromkeys(names or ()))
    return list(found)


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
    # Stop before writing anything rather than guess which bucket is the best tier.
    used = [] if buckets or label_config else buckets_used(path)
    # Each task is decoded to find where it ends and count its annotations, then dropped:
    # only new tasks are decoded again (a re-sync keeps no decoded tasks alive).
    tasks = ((text, task, annotation_count(task)) for text, task in iter_tasks(path))
    first = next(tasks, None)
    if first is None:
        return None, SyncSummary()
    if project_id is None:
        found = first[1].get("project") if isinstance(first[1], dict) else None
        project_id = found if isinstance(found, int) and 0 < found <= MAX_ID else 0

    def find_or_record(session: Session) -> ProjectInfo:
        project = ensure_project(session, (base_url or EXPORT_BASE_URL).rstrip("/"), project_id,
                                 title=title or path.stem[:300], template=CUSTOM, label_config=label_config or "")
        if used and not project.buckets:  # raised inside the transaction: the project row is not kept
            raise InputError(f"{path} ranks with buckets ({', '.join(used)}), and only the project's "
                             f"labelling config says which is the best tier: pass --buckets with them "
                             f"best first, or --label-config with the project's XML")
        return project

    project = in_transaction(sessions, find_or_record)
    if buckets:  # the caller knows better than a config the project may not have
        project = dataclasses.replace(project, bucket_order=tuple(buckets))
    total = SyncSummary()
    origin = str(path.resolve())[-500:]
    received = (Received(text, count) if not isinstance(task, Unusable) else Received(text, 0, unusable=task.reason)
                for text, task, count in itertools.chain([first], tasks))
    with reporter.progress("importing tasks") as advance:
        for batch in batches(received, batch_tasks):
            total.add(in_transaction(sessions, lambda session: store_tasks(
                session, project, batch, users={}, fields=fields, origin=origin)))
            advance(len(batch))
    with sessions.begin() as session:
        project_state(session, project, total)
    return project, total
