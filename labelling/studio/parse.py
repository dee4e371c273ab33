"""Label Studio tasks and annotations → candidates shown and tiers (pure functions).

A task's data names the prompt and the candidates in the order they were shown
(`prompt` and `items[]` with `id` and `body`, as in preflab's templates; other
field names through `TaskFields`). A prompt is text (one user turn) or a list of
messages (`preflab.db.conversation`); so is a candidate's text field, and an item
without one may hold its turns in `messages` (preflab's items for a reply of
several turns, shown as HTML). A malformed message list is refused naming the
field and the index. An annotation's result is read in every shape Label Studio
has written:

- Ranker: `{"ranker": {"<ranker name>": [ids]}}`, the pre-2023 `{"ranker": [ids]}`,
  and bucket mode `{"ranker": {"<bucket>": [ids], …, "_": [unranked]}}` where the
  buckets are tiers in the template's order (never in the order written: without
  the template, a bucket ranking is refused, not guessed). Each tier keeps its
  bucket's position: Tier 1 and Tier 3 with Tier 2 left empty are two tiers
  apart, as the annotator placed them (their pair's margin is 2, not 1);
- Pairwise: `{"selected": "left" | "right"}`, with an optional "Tie" choice;
- a skipped (cancelled) annotation.

Anything else raises `Invalid` with the reason it is quarantined for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from preflab.db.conversation import Messages, prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.ingest.records import unstorable
from preflab.errors import ConfigError, Invalid

UNRANKED_BUCKET = "_"
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


@dataclass(frozen=True)
class Parsed:
    """One annotation: tiers of item ids, best first (empty when skipped)."""

    tiers: tuple[tuple[str, ...], ...]
    skipped: bool = False
    shape: str = "ranker"  # ranker | ranker-legacy | buckets | pairwise | skipped
    # Buckets: each tier's position among the template's buckets (0 = best), gaps kept; else None.
    positions: tuple[int, ...] | None = None

    def tier_positions(self) -> tuple[int, ...]:
        """The position to store each tier at: its bucket's, or its rank among the tiers."""
        return self.positions if self.positions is not None else tuple(range(len(self.tiers)))

    @property
    def ranked(self) -> set[str]:
        return {i for tier in self.tiers for i in tier}


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


def _value(result: dict) -> dict:
    value = result.get("value")
    return value if isinstance(value, dict) else {}


def _check_ids(ids: Any, known: Sequence[str], seen: set[str], where: str) -> tuple[str, ...]:
    if not isinstance(ids, list):
        raise Invalid(f"ranker {where} is {type(ids).__name__}, not a list of item ids")
    out = []
    for raw in ids:
        if not isinstance(raw, (str, int)) or isinstance(raw, bool):
            raise Invalid(f"ranker {where} holds {raw!r}, not an item id")
        item = str(raw)
        if item not in known:
            raise Invalid(f"unknown item id {item!r} in ranker {where}")
        if item in seen:
            raise Invalid(f"item {item!r} is ranked twice")
        seen.add(item)
        out.append(item)
    return tuple(out)


def bucket_keys(ranker: Any, buckets: Sequence[str] = ()) -> list[str] | None:
    """The bucket names a ranker value ranks with, in the order written; None for a plain ranking.

    A value with a single key is a plain ranking named by that key, unless `buckets`
    (the template's) holds it; several keys, or the unranked column `_`, are buckets.
    """
    if not isinstance(ranker, dict) or not ranker:
        return None
    keys = list(ranker)
    if len(keys) == 1 and keys[0] != UNRANKED_BUCKET and keys[0] not in buckets:
        return None
    return [str(k) for k in keys if k != UNRANKED_BUCKET]


def unknown_bucket_order(names: Sequence[str]) -> str:
    """Why bucket tiers cannot be read without the template: the order Label Studio writes them in is not theirs."""
    return (
        f"the ranker's buckets ({', '.join(names)}) are tiers whose order only the labelling config "
        f"knows: pass --buckets BEST,…,WORST or --label-config"
    )


def _ranker(result: dict, known: Sequence[str], buckets: Sequence[str] | None) -> Parsed:
    ranker = _value(result).get("ranker")
    seen: set[str] = set()
    if isinstance(ranker, list):  # before 2023: {"ranker": [ids]}
        order = _check_ids(ranker, known, seen, "list")
        return Parsed(tuple((i,) for i in order), shape="ranker-legacy")
    if not isinstance(ranker, dict) or not ranker:
        raise Invalid(f"unrecognised ranker value {json.dumps(ranker, default=str)[:80]}")
    bucket_order = list(buckets or [])
    names = bucket_keys(ranker, bucket_order)
    if names is None:
        (name,) = ranker
        order = _check_ids(ranker[name], known, seen, repr(name))
        return Parsed(tuple((i,) for i in order), shape="ranker")
    if not bucket_order:
        # Label Studio writes buckets in no meaningful order (alphabetical, in its exports):
        # taking them as written would record preferences backwards. Never guess.
        raise Invalid(unknown_bucket_order(names))
    unknown = [k for k in names if k not in bucket_order]
    if unknown:
        raise Invalid(f"unknown bucket {unknown[0]!r} (the template's buckets: {', '.join(bucket_order)})")
    tiers, positions = [], []
    for position, name in enumerate(bucket_order):
        ids = _check_ids(ranker.get(name, []), known, seen, f"bucket {name!r}")
        if ids:
            tiers.append(ids)
            positions.append(position)
    _check_ids(ranker.get(UNRANKED_BUCKET, []), known, seen, "unranked column")
    return Parsed(tuple(tiers), shape="buckets", positions=tuple(positions))


def _pairwise(pairwise: dict | None, tie: bool, known: Sequence[str]) -> Parsed:
    if len(known) != 2:
        raise Invalid(f"a pairwise result needs a task with two items, not {len(known)}")
    left, right = known
    if tie:
        return Parsed(((left, right),), shape="pairwise")
    selected = _value(pairwise).get("selected")
    if selected == "left":
        return Parsed(((left,), (right,)), shape="pairwise")
    if selected == "right":
        return Parsed(((right,), (left,)), shape="pairwise")
    raise Invalid(f"pairwise selected {selected!r}, not 'left' or 'right'")


def _is_tie(result: dict) -> bool:
    choices = _value(result).get("choices")
    return isinstance(choices, list) and any(isinstance(c, str) and c.strip().lower() == "tie" for c in choices)


def parse_annotation(annotation: Any, known: Sequence[str], buckets: Sequence[str] | None = None) -> Parsed:
    """Tiers of item ids from one annotation; raises Invalid with the quarantine reason.

    Args:
        annotation: the annotation object as Label Studio wrote it.
        known: the task's item ids as shown (see `task_items`).
        buckets: the template's bucket names in order, when it has buckets.
    """
    if not isinstance(annotation, dict):
        raise Invalid("annotation is not an object")
    if annotation.get("was_cancelled"):
        return Parsed((), skipped=True, shape="skipped")
    result = annotation.get("result")
    if not isinstance(result, list):
        raise Invalid("annotation has no result list")
    if not result:
        raise Invalid("empty result: nothing was ranked")
    rankers, pairwise, tie, other = [], [], False, set()
    for r in result:
        if not isinstance(r, dict):
            raise Invalid("a result entry is not an object")
        kind, value = r.get("type"), _value(r)
        if kind == "ranker" or "ranker" in value:
            rankers.append(r)
        elif kind == "pairwise" or "selected" in value:
            pairwise.append(r)
        elif kind == "choices" and _is_tie(r):
            tie = True
        else:
            other.add(str(kind))
    if len(rankers) > 1 or len(pairwise) > 1:
        raise Invalid("several ranker or pairwise results in one annotation")
    if rankers and pairwise:
        raise Invalid("both a ranker and a pairwise result in one annotation")
    if rankers:
        parsed = _ranker(rankers[0], known, buckets)
    elif pairwise or tie:
        parsed = _pairwise(pairwise[0] if pairwise else None, tie, known)
    else:
        raise Invalid(f"no ranker or pairwise result (result types: {', '.join(sorted(other)) or 'none'})")
    if not parsed.tiers:
        raise Invalid("empty ranking: no response was put in a tier")
    return parsed


def same_as_shown(parsed: Parsed, shown: Sequence[str]) -> bool:
    """Whether a ranking is exactly the order shown: the annotator may not have moved anything."""
    if parsed.skipped or parsed.shape == "pairwise":
        return False  # a pairwise choice has no default to leave untouched
    return all(len(t) == 1 for t in parsed.tiers) and [t[0] for t in parsed.tiers] == list(shown)


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
