"""What every public-dataset format gives the importer: rankings built from a dataset's rows.

A format (`Format`) turns rows into `RankingRecord`s, the records the JSON Lines
import writes (`preflab.db.ingest.records`), and raises `Invalid` with the reason
a row is quarantined. Most formats read one row at a time; a format whose rankings
span rows (oasst2's message trees) groups consecutive rows by a column (`group_by`) and
parses each group.

`ranking` builds a record from a dataset's parts, checking them as an import
checks its lines: the prompt ends with the user's turn, the replies are
distinct, every string is storable. The small readers below (`text`, `number`,
`choice`, `messages_or_text`) read one field of a row, or raise `Invalid` naming it;
`split_shared` cuts two whole conversations into the prompt they share and the
reply each goes on with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from preflab.db.conversation import (Messages, messages, prompt_hash, prompt_messages, reply_hash, reply_messages,
                                     shared_prefix)
from preflab.db.ingest.lines import Invalid
from preflab.db.ingest.records import KINDS, LIMITS, RankingRecord, first_repeat, shown, unstorable, unstorable_text

__all__ = ["Format", "Invalid", "choice", "messages_or_text", "number", "ranking", "split_shared", "text"]


def ranking(prompt: Any, replies: Sequence[Any], tiers: Sequence[Sequence[int]], annotator: str, *,
            kind: str = "human", models: Sequence[str | None] | None = None,
            scores: Sequence[float | None] | None = None, details: dict[str, Any] | None = None,
            external_id: str | None = None, source: str | None = None,
            names: Sequence[str] | None = None) -> RankingRecord:
    """A checked ranking of `replies` (strings or message lists) for `prompt` (a string or messages).

    `tiers`: indices into `replies`, best first; a tie is one tier holding both.
    `names`: what the replies are called in a reason ("'chosen'"; default "reply 0", "reply 1"…).
    Raises Invalid naming the field that cannot be used.
    """
    names = list(names or [f"reply {i}" for i in range(len(replies))])
    turns = prompt_messages(prompt, "the prompt")
    answers = [reply_messages(r, names[i]) for i, r in enumerate(replies)]
    if len(answers) < 2:
        raise Invalid(f"fewer than two replies ({len(answers)})")
    hashes = [reply_hash(a) for a in answers]
    if repeat := first_repeat(hashes):
        raise Invalid(f"{names[repeat[0]]} and {names[repeat[1]]} are identical")
    models = [None if m is None else _fits("model", m) for m in (models or [None] * len(answers))]
    if external_id is not None:
        external_id = _fits("id", external_id)
    if kind not in KINDS:
        raise Invalid(f"unknown annotator kind {kind!r}")
    # One pass over all the text (the walk naming the field runs only when something is wrong: it costs
    # more than the rest of a ranking together, bench/README.md).
    texts = "".join([annotator, *(t["content"] for t in turns), *(t["content"] for a in answers for t in a)])
    if unstorable_text(texts) or (details is not None and not _storable(details)):
        raise Invalid(unstorable({"prompt": turns, "replies": answers, "annotator": annotator, "details": details})
                      or "holds text the database cannot store")
    return RankingRecord(prompt=turns, responses=answers, tiers=[list(t) for t in tiers], annotator=annotator,
                         kind=kind, external_id=external_id, models=models,
                         scores=None if scores is None else list(scores), source=source, details=details,
                         prompt_hash=prompt_hash(turns), response_hashes=hashes)


@dataclass(frozen=True)
class Format:
    """One public dataset's shape.

    Attributes:
        name: the `--format` value ("hh-rlhf").
        columns: the columns a row of this shape always has (`--format auto` matches on them).
        parse: row -> its rankings (most rows give one; a tie is a ranking too); raises Invalid.
        group_by: for formats whose rankings span rows, the column consecutive rows are grouped by (its
            value a string or an integer); `parse` then takes the list of a group's rows.
        group_name: what a group is called in a reason ("message tree").
        options: the import settings this format takes (`DatasetImportSettings` field name -> its default,
            e.g. {"score_field": "overall_score"}); `parse` receives them as keyword arguments.
        example: one row, for the README's "Bring your data" and `--help`.
    """

    name: str
    columns: frozenset[str]
    parse: Callable[..., list[RankingRecord]]
    group_by: str | None = None
    group_name: str = "group"
    options: dict[str, Any] = field(default_factory=dict)
    example: str = ""


def _storable(value: Any) -> bool:
    """Whether every string in a JSON value can be stored (orjson refuses a lone surrogate, escapes a NUL)."""
    try:
        return b"\\u0000" not in orjson.dumps(value)
    except TypeError:
        return False


def _fits(key: str, value: str) -> str:
    if len(value) > LIMITS[key]:
        raise Invalid(f"the {key} {shown(value)} is {len(value):,} characters long, over the limit of {LIMITS[key]}")
    return value


def text(row: dict[str, Any], key: str) -> str:
    """A non-empty string field; raises Invalid naming it."""
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"missing '{key}'" if value is None else f"'{key}' must be a non-empty string, not {shown(value)}")
    return value


def number(row: dict[str, Any], key: str, required: bool = True) -> float | None:
    """A finite number field (None when absent and not required); raises Invalid naming it."""
    value = row.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Invalid(f"missing '{key}'" if value is None else f"'{key}' must be a finite number, not {shown(value)}")
    return float(value)


def choice(row: dict[str, Any], key: str, allowed: Sequence[Any]) -> Any:
    """A field that must be one of `allowed` (1 and 1.0 and True are told apart); raises Invalid naming it."""
    value = row.get(key)
    if not any(type(value) is type(a) and value == a for a in allowed):
        expected = ", ".join(map(repr, allowed))
        raise Invalid(f"missing '{key}'" if value is None else f"'{key}' is {shown(value)}, not one of {expected}")
    return value


def messages_or_text(row: dict[str, Any], key: str) -> str | Messages:
    """A field holding text or a list of messages (checked for shape only); raises Invalid naming it."""
    value = row.get(key)
    if isinstance(value, str):
        return text(row, key)
    if value is None:
        raise Invalid(f"missing '{key}'")
    return messages(value, f"'{key}'")


def split_shared(a: Messages, b: Messages, names: Sequence[str] = ("'chosen'", "'rejected'")
                 ) -> tuple[Messages, Messages, Messages]:
    """Two whole conversations as (the prompt they share, what `a` goes on with, what `b` goes on with).

    The prompt is their longest shared prefix that ends with a user turn; each reply is the rest.
    Raises Invalid when they are identical or share no user turn.
    """
    if shared_prefix(a, b) == len(a) == len(b):
        raise Invalid(f"{names[0]} and {names[1]} are identical")
    n = shared_prefix(a, b)
    while n and a[n - 1]["role"] != "user":
        n -= 1
    if not n:
        raise Invalid(f"{names[0]} and {names[1]} share no prompt (no user turn begins both)")
    return a[:n], a[n:], b[n:]
