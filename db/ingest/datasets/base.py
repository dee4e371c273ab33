"""What every public-dataset format gives the importer: rankings built from a dataset's rows.

A format (`Format`) turns rows into `RankingRecord`s, the records the JSON Lines
import writes (`preflab.db.ingest.records`), and raises `Invalid` with the reason
a row is quarantined. Most formats read one row at a time; a format whose rankings
span rows (oasst2's message trees) groups consecutive rows by a column (`group_by`) and
parses each group.

Each format says who ranked its rows, as its dataset card documents (`Format.annotator`, `kind`,
`judged_by`): GPT-4 for UltraFeedback and Nectar, people for the rest. Where preflab cannot know
(the generic trl format), the names it assumes are in `Format.assumed`, and the import's summary says so.

Each format says what its rankings are by (`Format.criteria`): `overall` for most; a criterion each for
the verdicts of a dataset that rates several (UltraFeedback's aspects, PKU-SafeRLHF's helpfulness and
harmlessness, HelpSteer2's attributes), one ranking per row and criterion (`by_criteria`: a criterion
that gives none for a row does not lose the row's others).

`ranking`, `Replies` and `by_criteria` (`preflab.db.ingest.datasets.ranked`, re-exported here) build the
records from a dataset's parts, checking them as an import checks its lines. The small readers below (`text`, `number`,
`integer`, `choice`, `messages_or_text`) read one field of a row, or raise `Invalid` naming it;
`split_shared` cuts two whole conversations into the prompt they share and the
reply each goes on with; `without_empty` sets aside the empty replies of a row that has enough others.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from preflab.db.conversation import Messages, messages, shared_prefix
from preflab.db.ingest.datasets.cells import written_messages
from preflab.db.ingest.datasets.ranked import Replies, by_criteria, ranking
from preflab.db.ingest.records import RankingRecord, shown
from preflab.db.models import OVERALL
from preflab.errors import Invalid

__all__ = [
    "Format",
    "Replies",
    "by_criteria",
    "choice",
    "identifier",
    "integer",
    "messages_or_text",
    "number",
    "ranking",
    "split_shared",
    "text",
    "without_empty",
]


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
            e.g. {"criterion": None}); `parse` receives them as keyword arguments.
        criteria: what its rankings are by: one ranking per row (or group) and criterion. A format of
            several takes the `criterion` option (`--criterion NAME`: that one alone; None: all of these).
        on_request: the criteria it gives only when `--criterion` names one (UltraFeedback's fine_grained,
            hh-rlhf's subsets).
        subsets: a source file or folder name's prefix -> the criterion its rows are by, assumed when
            `--criterion` says none (hh-rlhf's `helpful-base`, `harmless-base`: the summary says so).
        example: one row, for the README's "Bring your data" and `--help`.
        annotator: the annotator its rankings are stored under (a pattern where a row or an option names it).
        kind: "human" or "ai": who ranked, as the dataset card documents.
        judged_by: who ranked, in words ("GPT-4", "Chatbot Arena users").
        assumed: annotator name -> why it is preflab's assumption, not the dataset's word (the import says so).
        texts: the columns it reads as text, which a CSV file's reader keeps as written (pandas would read a
            column of digits, such as the reply "7", as numbers; `sources.open_source`).
    """

    name: str
    columns: frozenset[str]
    parse: Callable[..., list[RankingRecord]]
    group_by: str | None = None
    group_name: str = "group"
    options: dict[str, Any] = field(default_factory=dict)
    example: str = ""
    annotator: str = ""
    kind: str = "human"
    judged_by: str = ""
    assumed: dict[str, str] = field(default_factory=dict)
    texts: frozenset[str] = frozenset()
    criteria: tuple[str, ...] = (OVERALL,)
    on_request: tuple[str, ...] = ()
    subsets: dict[str, str] = field(default_factory=dict)

    @property
    def offered(self) -> tuple[str, ...]:
        """Every criterion `--criterion` may name for this format."""
        return (*self.criteria, *self.on_request)


def text(row: dict[str, Any], key: str) -> str:
    """A non-empty string field; raises Invalid naming it."""
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise Invalid(
            f"missing '{key}'" if value is None else f"'{key}' must be a non-empty string, not {shown(value)}"
        )
    return value


def number(row: dict[str, Any], key: str, required: bool = True) -> float | None:
    """A finite number field (None when absent and not required); raises Invalid naming it."""
    value = row.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Invalid(f"missing '{key}'" if value is None else f"'{key}' must be a finite number, not {shown(value)}")
    return float(value)


def integer(row: dict[str, Any], key: str, allowed: Sequence[int]) -> int:
    """An integer field that must be one of `allowed`; a whole-number float (1.0) is that integer.

    pandas writes an integer column with a missing value as floats (1.0, and NaN for the missing one);
    1.5 and booleans are refused. Raises Invalid naming the field.
    """
    value = row.get(key)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value in allowed:
        return value
    expected = ", ".join(map(str, allowed))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise Invalid(f"missing '{key}'")
    if isinstance(value, float) and math.isfinite(value):
        raise Invalid(f"'{key}' is {shown(value)}, not a whole number (one of {expected})")
    raise Invalid(f"'{key}' is {shown(value)}, not one of {expected}")


def identifier(value: Any) -> str | None:
    """A row's id as text: a string as it is, an integer (or a whole-number float, as pandas writes one) in digits."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return str(value)


def without_empty(
    replies: Sequence[Any], names: Sequence[str], parts: Sequence[Any] | None = None
) -> tuple[list[int], list[tuple[str, Any, str]]]:
    """The indices of the replies to rank, and (name, part, reason) for each empty one set aside.

    One empty reply does not lose its row: with two or more others left, the empty ones are set aside
    (`RankingRecord.set_aside`: the import quarantines each alone, its part of the row, `parts[i]`, as
    its payload). With fewer, nothing is set aside, and `ranking` names the empty reply as the reason
    the row is quarantined.
    """
    empty = {i for i, reply in enumerate(replies) if isinstance(reply, str) and not reply.strip()}
    if not empty or len(replies) - len(empty) < 2:
        return list(range(len(replies))), []
    kept = [i for i in range(len(replies)) if i not in empty]
    parts = replies if parts is None else parts
    return kept, [
        (names[i], parts[i], f"{names[i]} is empty, so the row's other {len(kept)} replies were ranked without it")
        for i in sorted(empty)
    ]


def choice(row: dict[str, Any], key: str, allowed: Sequence[Any]) -> Any:
    """A field that must be one of `allowed` (1 and 1.0 and True are told apart); raises Invalid naming it."""
    value = row.get(key)
    if not any(type(value) is type(a) and value == a for a in allowed):
        expected = ", ".join(map(repr, allowed))
        raise Invalid(f"missing '{key}'" if value is None else f"'{key}' is {shown(value)}, not one of {expected}")
    return value


def messages_or_text(row: dict[str, Any], key: str) -> str | Messages:
    """A field holding text or a list of messages (checked for shape only); raises Invalid naming it.

    Text that is a list of messages written as JSON (a CSV cell's only way to hold one) is those messages.
    """
    value = row.get(key)
    if isinstance(value, str):
        listed = written_messages(value, key)
        return text(row, key) if listed is None else messages(listed, f"'{key}'")
    if value is None:
        raise Invalid(f"missing '{key}'")
    return messages(value, f"'{key}'")


def split_shared(
    a: Messages, b: Messages, names: Sequence[str] = ("'chosen'", "'rejected'"), same: bool = False
) -> tuple[Messages, Messages, Messages]:
    """Two whole conversations as (the prompt they share, what `a` goes on with, what `b` goes on with).

    The prompt is their longest shared prefix that ends with a user turn; each reply is the rest.
    Raises Invalid when they share no user turn, or are identical (unless `same`: then both replies are
    the one after their last user turn).
    """
    if shared_prefix(a, b) == len(a) == len(b) and not same:
        raise Invalid(f"{names[0]} and {names[1]} are identical")
    n = shared_prefix(a, b)
    while n and a[n - 1]["role"] != "user":
        n -= 1
    if not n:
        raise Invalid(f"{names[0]} and {names[1]} share no prompt (no user turn begins both)")
    return a[:n], a[n:], b[n:]
