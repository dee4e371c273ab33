"""The public-dataset formats by name (`FORMATS`), how rows are parsed with one, and `--format auto`.

A format's rows are parsed a unit at a time (`units`): one row, or for a format with a `group_key`
(oasst2) the consecutive rows sharing a key. `parse_unit` gives the unit's rankings or raises
`Invalid`, the reason every row of the unit is quarantined for.

`--format auto` (`detect`) takes the formats whose columns the first rows have and, of those, the
one that reads most of them (the one with more columns on a tie: hh-rlhf's `chosen`/`rejected`
transcripts also have TRL's columns, and TRL cannot read them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from preflab.db.ingest.datasets import arena, helpsteer, hh, nectar, oasst, pku, shp, trl, ultrafeedback
from preflab.db.ingest.datasets.base import Format, Invalid
from preflab.db.ingest.datasets.sources import Row
from preflab.db.ingest.records import RankingRecord

FORMATS: dict[str, Format] = {f.name: f for f in (
    trl.FORMAT, hh.FORMAT, ultrafeedback.FORMAT, arena.FORMAT, oasst.FORMAT, helpsteer.FORMAT, shp.FORMAT,
    nectar.FORMAT, pku.FORMAT,
)}

PEEK_ROWS = 100  # the rows `--format auto` reads, and that all failing stops an import


def units(fmt: Format, rows: Iterable[Row]) -> Iterator[list[Row]]:
    """The rows in the units `fmt` parses: each row alone, or consecutive rows sharing `fmt.group_key`.

    A row that is not one (no data), or whose key cannot be read, is a unit alone.
    """
    if fmt.group_key is None:
        for row in rows:
            yield [row]
        return
    group: list[Row] = []
    last: Any = None
    for row in rows:
        key = _key(fmt, row)
        if group and (key is None or key != last):
            yield group
            group = []
        if key is None:
            yield [row]
            continue
        group.append(row)
        last = key
    if group:
        yield group


def _key(fmt: Format, row: Row) -> Any:
    if row.data is None:
        return None
    try:
        return fmt.group_key(row.data)
    except (Invalid, KeyError, TypeError, AttributeError):
        return None  # parsed alone, the row says what is wrong with it


def parse_unit(fmt: Format, unit: list[Row], options: dict[str, Any]) -> list[RankingRecord]:
    """The rankings of one unit of rows; raises Invalid with the reason its rows are quarantined.

    `options` are the keyword arguments the format's `parse` takes (see `format_options`).
    """
    bad = next((row for row in unit if row.data is None), None)
    if bad is not None:
        raise Invalid(bad.error or "not a row")
    try:
        if fmt.group_key is None:
            return fmt.parse(unit[0].data, **options)
        return fmt.parse([row.data for row in unit], **options)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        # A field of an unexpected type the format did not check for: the row is still only a bad row.
        raise Invalid(f"not a {fmt.name} row ({type(exc).__name__}: {str(exc)[:80]})") from None


def format_options(fmt: Format, given: dict[str, Any]) -> dict[str, Any]:
    """The format's options: the value given (not None), else the format's default."""
    return {name: given[name] if given.get(name) is not None else default for name, default in fmt.options.items()}


def readable(fmt: Format, rows: list[Row]) -> tuple[int, str | None]:
    """How many of `rows` parse as `fmt` (with its defaults), and the first reason one does not."""
    ok, reason = 0, None
    options = format_options(fmt, {})
    for unit in units(fmt, rows):
        try:
            parse_unit(fmt, unit, options)
            ok += len(unit)
        except Invalid as exc:
            reason = reason or f"{unit[0].locator}: {exc}"
    return ok, reason


def columns(rows: list[Row]) -> set[str]:
    return {key for row in rows if row.data is not None for key in row.data}


def detect(rows: list[Row], exclude: Format | None = None, readable_only: bool = False) -> Format | None:
    """The format the rows' columns fit, that reads most of them; None when none fits.

    `readable_only`: only a format that reads at least one of them.
    """
    have = columns(rows)
    best, best_key = None, None
    for fmt in FORMATS.values():
        if fmt is exclude or not fmt.columns <= have:
            continue
        key = (readable(fmt, rows)[0], len(fmt.columns))
        if (best_key is None or key > best_key) and (key[0] or not readable_only):
            best, best_key = fmt, key
    return best
