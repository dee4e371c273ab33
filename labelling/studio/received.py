"""A Label Studio task as received: its text, kept as its raw record, and its annotation count.

`Received` is what `store_tasks` is given, by `ls sync` (tasks decoded from the
API), `ls import` (text from an export file, decoded only when new) and the
webhooks; `shown_id` writes an id into a raw record's locator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from preflab.labelling.studio.parse import VOLATILE, encodable


def as_received(text: str) -> str | bytes:
    """What a task's text is stored as: the bytes received where they were not UTF-8 text."""
    if encodable(text):
        return text
    return text.encode("utf-8", "surrogateescape")  # read with surrogateescape: give back the very bytes


def shown_id(value: Any) -> str:
    """An id for a raw record's locator: as it came when an integer, else escaped and cut short."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def task_text(task: dict) -> str:
    """A task as received, for its raw record (the fields Label Studio recomputes on every request left out)."""
    annotations = task.get("annotations")
    if isinstance(annotations, list):
        task = dict(
            task,
            annotations=[
                {k: v for k, v in a.items() if k not in VOLATILE} if isinstance(a, dict) else a for a in annotations
            ],
        )
    text = json.dumps(task, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    # A lone surrogate (sent as a \\udXXX escape): kept as that escape, which the database can store.
    return text if encodable(text) else json.dumps(task, sort_keys=True, separators=(",", ":"), default=str)


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
    def of(cls, task: Any) -> Received:
        """A task decoded already (from the API)."""
        text = task_text(task) if isinstance(task, dict) else json.dumps(task, default=str)
        return cls(text, annotation_count(task), task)

    def decoded(self) -> Any:
        if self.task is None:
            self.task = json.loads(self.text)
        return self.task
