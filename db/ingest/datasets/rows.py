"""A dataset's rows as every source gives them: a `Row` per row, and the `Source` that yields them.

`value_row` and `batch_rows` make rows of values read as Python objects (Arrow batches, `datasets`), stored
raw as their JSON; `preflab.db.ingest.datasets.sources` opens files and folders, and
`preflab.db.ingest.datasets.hub` reads through `datasets.load_dataset`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import orjson

from preflab.db.ingest.records import unstorable
from preflab.db.store import shown_payload


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is slower, and a row is made per row read
class Row:
    """One row as read: `data` is None when it is not a row (then `error` says why)."""

    split: str
    index: int
    payload: str | bytes
    digest: str
    data: dict[str, Any] | None
    error: str | None = None

    @property
    def locator(self) -> str:
        """Where the row is: its split and its index in it, from 0 (`dataset[split][index]`)."""
        return f"{self.split}:{self.index}"


@dataclass
class Source:
    """An opened SOURCE: what it is called (`raw_records.origin`), its rows, and how many when known."""

    origin: str
    rows: Iterator[Row]
    total: int | None = None


def _dumped(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return shown_payload(bytes(value))
    return str(value)


def value_row(split: str, index: int, data: Any) -> Row:
    """A row read as a Python value (Arrow, `datasets`): stored raw as its JSON."""
    payload = orjson.dumps(data, default=_dumped, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    digest = hashlib.sha256(payload).hexdigest()
    text = payload.decode("utf-8")
    if not isinstance(data, dict):
        return Row(split, index, text, digest, None, f"expected a JSON object, got {type(data).__name__}")
    # orjson writes a NUL as an escape, and refuses a lone surrogate: only then is there something to name.
    reason = unstorable(data) if "\\u0000" in text else None
    return Row(split, index, text, digest, None if reason else data, reason)


def batch_rows(batches: Iterator[list[dict]], split: str, start: int = 0) -> Iterator[Row]:
    index = count(start)
    for batch in batches:
        for data in batch:
            yield value_row(split, next(index), data)
