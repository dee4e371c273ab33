"""What a flat file's cell means: a list or an object can only be written there as text.

A CSV cell holds text. A column that holds lists in a dataset's published shape (UltraFeedback's
`completions`, Nectar's `answers`, Arena's conversations) comes from a CSV as the list's JSON, and so
does a conversation in a column that may hold text or messages (the trl format's `chosen`). Read as JSON,
such a cell is the list it was written from, so the same rows as CSV, JSON Lines or Parquet are the same
rankings; a cell written by Python's `repr` (`str(list)`, as pandas writes a column of lists) is not JSON,
cannot be read back safely, and is refused in one sentence naming the field rather than stored as text.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from preflab.db.ingest.datasets.rows import Row
from preflab.errors import Invalid

# Python's repr of a list or dict of strings: [{'role': …  or  {'text': …  or  ['a', …
_REPR = re.compile(r"""^\s*[\[{]\s*[\[{]?\s*'""")


def written(value: str, key: str) -> Any:
    """The list or object a cell's text was written from (JSON), or None where the text is only text.

    Raises Invalid when the text is a list or dict written by Python's `repr`, which is not JSON.
    """
    stripped = value.lstrip()
    if not stripped.startswith(("[", "{")):
        return None
    try:
        found = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        if _REPR.match(stripped):
            raise Invalid(
                f"'{key}' holds a list written by Python's repr, not as JSON: write its cells as JSON, "
                "or the file as JSON Lines or Parquet"
            ) from None
        return None
    return found if isinstance(found, (list, dict)) else None


def written_messages(value: str, key: str) -> list[dict[str, Any]] | None:
    """The messages a text cell was written from (a JSON list of role/content objects), or None (it is text)."""
    found = written(value, key)
    if isinstance(found, list) and found and all(isinstance(m, dict) and "role" in m for m in found):
        return found
    return None


def csv_row(row: Row, texts: frozenset[str]) -> Row:
    """A CSV row with its list and object cells read as JSON (the columns some format reads as text left as written).

    The payload stored raw stays the row as read; only what is parsed changes. A cell Python's repr wrote
    makes the row one that is not read, with the reason.
    """
    if row.data is None:
        return row
    data = dict(row.data)
    for key, value in row.data.items():
        if isinstance(value, str) and key not in texts:
            try:
                found = written(value, key)
            except Invalid as exc:
                row.data, row.error = None, str(exc)
                return row
            if found is not None:
                data[key] = found
    row.data = data
    return row
