"""What every public-dataset format gives the importer: rankings built from a dataset's rows.

A format (`Format`) turns rows into `RankingRecord`s, the records the JSON Lines
import writes (`preflab.db.ingest.records`), and raises `Invalid` with the reason
a row is quarantined. Most formats read one row at a time; a format whose rankings
span rows (oasst2's message trees) groups consecutive rows by `group_key` and
parses each group.

`ranking` builds a record from a dataset's parts, checking them as an import
checks its lines: the prompt ends with the user's turn, the replies are
distinct, every string is storable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from preflab.db.conversation import Messages, prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.ingest.lines import Invalid
from preflab.db.ingest.records import KINDS, RankingRecord, unstorable

__all__ = ["Format", "Invalid", "ranking"]


def ranking(prompt: Any, replies: Sequence[Any], tiers: Sequence[Sequence[int]], annotator: str, *,
            kind: str = "human", models: Sequence[str | None] | None = None,
            scores: Sequence[float | None] | None = None, details: dict[str, Any] | None = None,
            external_id: str | None = None, source: str | None = None) -> RankingRecord:
    """A checked ranking of `replies` (strings or message lists) for `prompt` (a string or messages).

    `tiers`: indices into `replies`, best first; a tie is one tier holding both.
    Raises Invalid naming the field that cannot be used.
    """
    turns = prompt_messages(prompt, "the prompt")
    answers = [reply_messages(r, f"reply {i}") for i, r in enumerate(replies)]
    if len(answers) < 2:
        raise Invalid(f"fewer than two replies ({len(answers)})")
    hashes = [reply_hash(a) for a in answers]
    if len(set(hashes)) < len(hashes):
        first = next(i for i, h in enumerate(hashes) if hashes.index(h) != i)
        raise Invalid(f"replies {hashes.index(hashes[first])} and {first} are identical")
    if kind not in KINDS:
        raise Invalid(f"unknown annotator kind {kind!r}")
    reason = unstorable({"prompt": turns, "replies": answers, "annotator": annotator, "details": details})
    if reason:
        raise Invalid(reason)
    return RankingRecord(prompt=turns, responses=answers, tiers=[list(t) for t in tiers], annotator=annotator,
                         kind=kind, external_id=external_id, models=list(models or [None] * len(answers)),
                         scores=None if scores is None else list(scores), source=source, details=details,
                         prompt_hash=prompt_hash(turns), response_hashes=hashes)


@dataclass(frozen=True)
class Format:
    """One public dataset's shape.

    Attributes:
        name: the `--format` value ("hh-rlhf").
        columns: the columns a row of this shape always has (`--format auto` matches on them).
        parse: row -> its rankings (most rows give one; a tie is a ranking too); raises Invalid.
        group_key: for formats whose rankings span rows, row -> the key consecutive rows are grouped by;
            `parse` then takes the list of a group's rows.
        example: one row, for the README's "Bring your data" and `--help`.
    """

    name: str
    columns: frozenset[str]
    parse: Callable[..., list[RankingRecord]]
    group_key: Callable[[dict[str, Any]], Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    example: str = ""
