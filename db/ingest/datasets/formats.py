"""The public-dataset formats by name (`FORMATS`), how rows are parsed with one, and `--format auto`.

A format's rows are parsed a unit at a time (`units`): one row, or for a format with a `group_by`
column (oasst2's trees, HelpSteer2's prompts) the consecutive rows sharing its value; a group whose rows
are not together is refused whole (`split_groups` finds them, `Refusals` applies it). `parse_unit` gives
the unit's rankings or raises `Invalid`, the reason every row of the unit is quarantined for.

`--format auto` (`detect`) takes the formats whose columns the first rows have and, of those, the
one that reads most of them (the one with more columns on a tie: hh-rlhf's `chosen`/`rejected`
transcripts also have TRL's columns, and TRL cannot read them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from preflab.db.ingest.datasets import arena, helpsteer, helpsteer2, hh, nectar, oasst, pku, shp, trl, ultrafeedback
from preflab.db.ingest.datasets.base import Format
from preflab.db.ingest.datasets.rows import Row
from preflab.db.ingest.records import RankingRecord
from preflab.errors import Invalid

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        trl.FORMAT,
        hh.FORMAT,
        ultrafeedback.FORMAT,
        arena.FORMAT,
        oasst.FORMAT,
        helpsteer.FORMAT,
        helpsteer2.FORMAT,
        shp.FORMAT,
        nectar.FORMAT,
        pku.FORMAT,
    )
}

PEEK_ROWS = 100  # the rows `--format auto` reads, and that all failing stops an import
# The columns some format reads as text: a CSV file keeps them as written (the format is not known yet
# when `--format auto` reads the first rows).
TEXT_COLUMNS = frozenset().union(*(f.texts for f in FORMATS.values()))


class Unit(list):
    """The rows parsed together; `key`: their group's key (None: a row alone)."""

    key: str | int | None = None


def group_key(fmt: Format, data: Any) -> str | int | None:
    """The group a row belongs to: its `fmt.group_by` value, a non-empty string or an integer; else None (alone)."""
    value = data.get(fmt.group_by) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        return None
    return value


def group_label(key: Any, width: int = 60) -> str:
    """A group's key for a reason: as it is, cut short (HelpSteer2's groups are keyed by their whole prompt)."""
    label = str(key)
    return label if len(label) <= width else label[: width - 1] + "…"


def apart(fmt: Format, key: Any, detail: str) -> str:
    """Why a group whose rows are not together is quarantined: one line, saying how to fix the file."""
    return (
        f"the rows of {fmt.group_name} {group_label(key)} are not together; sort the file by {fmt.group_by} ({detail})"
    )


def units(fmt: Format, rows: Iterable[Row]) -> Iterator[Unit]:
    """The rows in the units `fmt` parses: each row alone, or consecutive rows sharing `fmt.group_by`'s value.

    A row that is not one (no data), or whose key cannot be read, is a unit alone. Which groups are
    quarantined whole is decided apart from this (`Refusals`), so units can be parsed before it is known.
    """
    if fmt.group_by is None:
        for row in rows:
            yield Unit((row,))
        return
    group = Unit()
    last: Any = None
    for row in rows:
        key = group_key(fmt, row.data)
        if group and key != last:
            yield group
            group = Unit()
        if key is None:
            yield Unit((row,))
        else:
            group.key = key
            group.append(row)
        last = key
    if group:
        yield group


class Refusals:
    """Why a unit's rows are quarantined whole before its rankings are used, asked of each unit in file order.

    `refused`: group key -> reason, from the first read (`split_groups`). A group met again after other
    rows is refused in any case (from then on), so no group is ever used from part of its rows twice.
    """

    def __init__(self, fmt: Format, refused: dict[Any, str]):
        self.fmt, self.refused, self.seen = fmt, refused, set()

    def reason(self, unit: Unit) -> str | None:
        key = unit.key
        if key is None:
            return None
        if key in self.seen and key not in self.refused:
            self.refused[key] = apart(self.fmt, key, "met again after other rows")
        self.seen.add(key)
        return self.refused.get(key)


class Refused(dict):
    """Group key -> why its rows are quarantined whole; `apart`: how many groups are not together."""

    apart: int = 0


def split_groups(fmt: Format, values: Iterable[Any], limit: int | None = None) -> Refused:
    """The groups an import cannot parse whole, with the reason their rows are quarantined.

    `values`: every row's `fmt.group_by` value, in the order the import reads the rows
    (`sources.column_values`), one row past `limit` where there is one. A group whose rows come in more
    than one run would be parsed from part of its rows, and a later import of the sorted file could not
    complete it (its rankings' ids are taken), so every run of it is refused; so is the group `limit` cuts.
    """
    if fmt.group_by is None:
        return Refused()
    runs: dict[Any, int] = {}
    last: Any = None
    cut = None
    for n, value in enumerate(values):
        key = group_key(fmt, {fmt.group_by: value})
        if limit is not None and n >= limit:
            cut = key if key is not None and key == last else None
            break
        if key is not None and key != last:
            runs[key] = runs.get(key, 0) + 1
        last = key
    out = Refused((key, apart(fmt, key, f"they come in {count} runs")) for key, count in runs.items() if count > 1)
    out.apart = len(out)
    if cut is not None and cut not in out:
        out[cut] = (
            f"the rows of {fmt.group_name} {group_label(cut)} go on past --limit {limit}: "
            "give a higher --limit to import it"
        )
    return out


def parse_unit(fmt: Format, unit: list[Row], options: dict[str, Any]) -> list[RankingRecord]:
    """The rankings of one unit of rows; raises Invalid with the reason its rows are quarantined.

    `options` are the keyword arguments the format's `parse` takes (see `format_options`).
    """
    bad = next((row for row in unit if row.data is None), None)
    if bad is not None:
        raise Invalid(bad.error or "not a row")
    try:
        if fmt.group_by is None:
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
