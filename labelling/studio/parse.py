"""Label Studio tasks → the prompt and candidates shown, and annotations' raw records (pure functions).

A task's data names the prompt and the candidates in the order they were shown
(`prompt` and `items[]` with `id` and `body`, as in preflab's templates; other
field names through `TaskFields`). A prompt is text (one user turn) or a list of
messages (`preflab.db.conversation`); so is a candidate's text field, and an item
without one may hold its turns in `messages` (preflab's items for a reply of
several turns, shown as HTML). A malformed message list is refused naming the
field and the index. An annotation's result is read by `results.py`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from preflab.db.conversation import Messages, prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.ingest.records import unstorable
from preflab.errors import ConfigError, Invalid

# In each task's data that `ls push` creates: "<prompt id>:<candidate set hash>". A later push adopts
# tasks it created but did not record by it; an export of the tasks is known by it.
KEY_FIELD = "preflab_task"
# Fields Label Studio recomputes on every request ("3 minutes ago"): not part of the payload.
VOLATILE = frozenset({"created_ago", "created_username"})
# The field of an item that holds a reply's turns when the item has no text field (`ls push` writes it).
ITEM_TURNS = "messages"


@dataclass(frozen=True)
class TaskFields:
    """Where the prompt and the candidates are in a task's data (preflab's templates: the defaults)."""

    prompt_field: str = field(default="prompt", metadata={"help": "Task data field holding the prompt."})
    items_field: str = field(default="items", metadata={"help": "Task data list of candidates."})
    id_field: str = field(default="id", metadata={"help": "Candidate id field inside each item."})
    text_field: str = field(default="body", metadata={"help": "Candidate text field inside each item."})
    pair_fields: str | None = field(
        default=None,
        metadata={
            "help": "LEFT,RIGHT: for pairwise projects without an items list, the two task data fields compared."
        },
    )

    def __post_init__(self) -> None:
        if self.pair_fields is not None and self.pair is None:
            raise ConfigError(f"--pair-fields takes two field names separated by a comma, not {self.pair_fields!r}")

    @property
    def pair(self) -> tuple[str, str] | None:
        """The two fields of `pair_fields` (None when not given or malformed)."""
        if self.pair_fields is None:
            return None
        pair = tuple(p.strip() for p in self.pair_fields.split(","))
        return pair if len(pair) == 2 and all(pair) else None


@dataclass(frozen=True)
class TaskItems:
    """A task's prompt and its candidates as shown, top (or left) first, as messages with their hashes."""

    prompt: Messages
    ids: tuple[str, ...]
    replies: tuple[Messages, ...]
    prompt_key: str  # `prompt_hash` of the prompt: the stored prompt's identity
    reply_keys: tuple[str, ...]  # `reply_hash` of each candidate


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{what} is not a non-empty string")
    flaw = unstorable(value, what)  # the rule of every reader: a NUL or a lone surrogate is refused
    if flaw:
        raise Invalid(flaw)
    return value


def _turns(value: Any, what: str, read: Callable[[Any, str], Messages]) -> Messages:
    """A prompt or a reply (`read`: `prompt_messages` or `reply_messages`) from text or a message list."""
    if isinstance(value, list):
        turns = read(value, what)  # raises Invalid naming `what` and the index
        flaw = unstorable(value, what)
        if flaw:
            raise Invalid(flaw)
        return turns
    if isinstance(value, str) or value is None:
        return read(_text(value, what), what)
    raise Invalid(f"{what} is {type(value).__name__}, not text or a list of messages")


# A JSON escape of one half of a surrogate pair: alone, it decodes to what UTF-8 cannot hold.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def encodable(text: str) -> bool:
    """Whether text can be stored as UTF-8 (no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def may_hold_flaws(text: str) -> bool:
    """Whether a JSON text may decode to text the database cannot store: a cheap test before `unstorable`."""
    return "\\u0000" in text or "\x00" in text or bool(SURROGATE_ESCAPE.search(text)) or not encodable(text)


MAX_ID = 2**31 - 1  # Label Studio's ids, and the integer columns that keep them


def ls_id(value: Any, what: str) -> int:
    """A Label Studio id (task, annotation, user): a positive integer the database can hold."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_ID:
        raise Invalid(f"{what} {str(value)[:40]!r} is not a Label Studio id")
    return value


def _reply(item: dict, item_id: str, fields: TaskFields) -> Messages:
    if fields.text_field not in item and isinstance(item.get(ITEM_TURNS), list):
        return _turns(item[ITEM_TURNS], f"item {item_id!r} '{ITEM_TURNS}'", reply_messages)
    return _turns(item.get(fields.text_field), f"item {item_id!r} '{fields.text_field}'", reply_messages)


def task_items(data: Any, fields: TaskFields = TaskFields()) -> TaskItems:
    """The prompt and candidates of a task's data; raises Invalid when they are not there."""
    if not isinstance(data, dict):
        raise Invalid("task data is not an object")
    if fields.prompt_field not in data:
        raise Invalid(f"task data has no '{fields.prompt_field}' field")
    prompt = _turns(data[fields.prompt_field], f"task data '{fields.prompt_field}'", prompt_messages)
    if fields.pair is not None and fields.items_field not in data:
        left, right = fields.pair
        ids = ("left", "right")
        replies = [_turns(data.get(side), f"task data '{side}'", reply_messages) for side in (left, right)]
    else:
        items = data.get(fields.items_field)
        if not isinstance(items, list) or len(items) < 2:
            raise Invalid(f"task data '{fields.items_field}' is not a list of at least two items")
        ids, replies = [], []
        for n, item in enumerate(items):
            if not isinstance(item, dict) or fields.id_field not in item:
                raise Invalid(f"item {n} of task data has no '{fields.id_field}'")
            item_id = str(item[fields.id_field])
            if item_id in ids:
                raise Invalid(f"item id {item_id!r} appears twice in the task data")
            ids.append(item_id)
            replies.append(_reply(item, item_id, fields))
    keys = [reply_hash(turns) for turns in replies]
    seen: dict[str, str] = {}
    for item_id, key in zip(ids, keys):
        if key in seen:
            raise Invalid(f"items {seen[key]!r} and {item_id!r} have the same text")
        seen[key] = item_id
    return TaskItems(prompt, tuple(ids), tuple(replies), prompt_hash(prompt), tuple(keys))


def _dumps(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    if encodable(text):
        return text
    # A lone surrogate: kept as its \\udXXX escape, the one form the database can store.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def task_json(task: dict) -> str:
    """The part of a task every raw record of its annotations carries: its id, project and data."""
    return _dumps({"id": task.get("id"), "project": task.get("project"), "data": task.get("data")})


def payload(task: dict | str, annotation: dict) -> str:
    """The raw record of one annotation: the annotation as received, with its task's id and data.

    The task data travels with it so a quarantined record can be read (and
    re-parsed) on its own; keys are sorted so the same content hashes the same.
    `task` may be `task_json(task)`, computed once for all of a task's annotations.
    """
    if not VOLATILE.isdisjoint(annotation):
        annotation = {k: v for k, v in annotation.items() if k not in VOLATILE}
    # Written as {"annotation": …, "task": …}: the keys in sorted order, as _dumps would.
    return f'{{"annotation":{_dumps(annotation)},"task":{task if isinstance(task, str) else task_json(task)}}}'
