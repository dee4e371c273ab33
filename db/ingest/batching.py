"""An import's input cut into batches, one per transaction, whichever reader feeds it.

A batch is capped twice: by rows (what a crash loses, and a conflict with another writer
redoes) and by bytes (what memory holds: a batch of long lines or rows is cut short). A
JSON Lines file's unit is a line; a dataset's is a unit of rows never split (oasst2's tree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from preflab.errors import InputError

T = TypeVar("T")


def capped_batches(
    units: Iterable[T],
    max_rows: int,
    max_bytes: int,
    size: Callable[[T], int],
    rows: Callable[[T], int] | None = None,
) -> Iterator[list[T]]:
    """Units in batches of at most `max_rows` rows or about `max_bytes` bytes; a unit is never split.

    Args:
        size: a unit's bytes.
        rows: how many rows a unit holds (default: one each).

    Raises:
        InputError: the input is damaged part-way; the batch read before the damage is yielded first.
    """
    out: list[T] = []
    n = weight = 0
    try:
        for unit in units:
            out.append(unit)
            n += 1 if rows is None else rows(unit)
            weight += size(unit)
            if n >= max_rows or weight >= max_bytes:
                yield out
                out, n, weight = [], 0, 0
    except InputError:  # damaged part-way: the units read before the damage still count
        if out:
            yield out
        raise
    if out:
        yield out
