"""One batch of a dataset import: parsed with no database, then stored inside the caller's transaction.

`parse_batch` parses a batch's units of rows (it runs while the batch before it commits); `import_rows`
stores every row raw, the replies (and a row's criteria that gave no ranking) set aside alone, quarantines
what cannot be used and writes the rankings (`preflab.db.ingest.writer.write_rankings`), each identified
by the dataset's id or else by what it means (`preflab.db.ingest.identity`), never by the bytes of its row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from preflab.db.bulk import lookup
from preflab.db.ingest.datasets.base import Format
from preflab.db.ingest.datasets.formats import parse_unit
from preflab.db.ingest.datasets.rows import Row
from preflab.db.ingest.datasets.summary import DatasetSummary, Repeated, part_digest, part_payload
from preflab.db.ingest.identity import record_identity
from preflab.db.ingest.writer import write_rankings
from preflab.db.models import RawRecord, RawStatus
from preflab.db.store import RawMap, quarantine, release, store_raw
from preflab.errors import Invalid

# A unit of rows and what parsing it gave: its records, or why it cannot be used.
Parsed = tuple[list[Row], list[Any] | Invalid]


def parse_batch(
    batch: list[list[Row]], fmt: Format, options: dict[str, Any], annotator: str | None = None, kind: str | None = None
) -> list[Parsed]:
    """Parse a batch's units (no database: this runs while the batch before it commits).

    `annotator`, `kind`: who ranked, where the import says (`--annotator`, `--annotator-kind`); what the
    format assumed (`Format.assumed`) is marked on the record unless the kind is given.
    """
    parsed: list[Parsed] = []
    for unit in batch:
        try:
            records = parse_unit(fmt, unit, options)
        except Invalid as exc:
            parsed.append((unit, exc))
            continue
        for record in records:
            record.assumed = fmt.assumed.get(record.annotator) if kind is None else None
            record.annotator, record.kind = annotator or record.annotator, kind or record.kind
        parsed.append((unit, records))
    return parsed


def import_rows(session: Session, batch: list[Parsed], fmt: Format, origin: str) -> DatasetSummary:
    """Import one parsed batch inside the caller's transaction: every row raw, then the rankings."""
    source = f"import:{fmt.name}"
    summary = DatasetSummary(fmt.name)
    rows = [row for unit, _ in batch for row in unit]
    summary.rows = len(rows)
    for row in rows:
        summary.splits[row.split] = summary.splits.get(row.split, 0) + 1
    for _, records in batch:
        for record in [] if isinstance(records, Invalid) else records:
            if record.external_id is None:  # what the row means: its identity where the dataset gives no id
                record.external_id = record_identity(fmt.name, record)
    # the replies set aside, each stored raw alone (its part of the row, identified by its ranking's identity and
    # its name: the same row in another file sets it aside once) and quarantined with its reason
    aside = [
        (unit[0].locator, record.external_id, part)
        for unit, records in batch
        if not isinstance(records, Invalid)
        for record in records
        for part in record.set_aside
    ]
    parts = [
        (f"{locator}/{name}", part_payload(value), part_digest(identity, name), reason)
        for locator, identity, (name, value, reason) in aside
    ]
    raw = store_raw(
        session,
        source,
        origin,
        [(row.locator, row.payload, row.digest) for row in rows] + [part[:3] for part in parts],
        append=True,
    )
    reasons: dict[int, str] = {raw[h][0]: reason for _, _, h, reason in parts if h in raw.new}
    # a part named by one of the format's criteria is that criterion of its row, which gave no ranking
    summary.quarantined_criteria = sum(name in fmt.offered for _, _, (name, _, _) in aside)
    summary.quarantined_replies = len(parts) - summary.quarantined_criteria
    released: list[int] = []
    again: list[tuple[Row, str]] = []
    parsed = []
    for unit, records in batch:
        if isinstance(records, Repeated):
            summary.duplicates += len(unit)
            continue
        if isinstance(records, Invalid):
            # A row new to this import is quarantined itself; one stored before keeps its record (its rankings
            # may be stored), and is listed with this import's reason by `listed_again`.
            reasons.update((raw[row.digest][0], str(records)) for row in unit if row.digest in raw.new)
            again += [(row, str(records)) for row in unit if row.digest not in raw.new]
            summary.count_quarantined(str(records), len(unit))
            continue
        # Rows quarantined by an earlier import and used now (a tree that was not together, the file now sorted)
        released += [raw[row.digest][0] for row in unit if raw[row.digest][1] == RawStatus.quarantined.value]
        first = unit[0].digest
        for record in records:
            record.source = record.source or source
            summary.count_assumed(record)
            parsed.append((record, first, raw[first][0]))
    reasons.update(listed_again(session, source, origin, again, raw))
    quarantine(session, reasons)
    release(session, released)
    summary.count_rankings(write_rankings(session, parsed, source, summary))
    return summary


def listed_again(
    session: Session, source: str, origin: str, rows: list[tuple[Row, str]], raw: RawMap
) -> dict[int, str]:
    """Rows stored before that this import could not use: raw record id -> reason, for `quarantine`.

    Every row an import's summary counts quarantined is in `preflab quarantine list` with the reason it
    gives. A row stored before keeps its record: used then (by another `--criterion`, in a tree that was
    together), or quarantined for another reason. So this import's reason is a raw record of its own, the
    row's payload identified by the row and the reason (`part_digest`), stored once however often the row
    is read so. A row quarantined before for the same reason is listed already.
    """
    held = [raw[row.digest][0] for row, _ in rows if raw[row.digest][1] == RawStatus.quarantined.value]
    stored = dict(lookup(session, RawRecord.__table__, ("id", "reason"), "id", held))
    readings = {
        part_digest(row.digest, f"quarantined: {reason}"): (row.locator, row.payload, reason)
        for row, reason in rows
        if stored.get(raw[row.digest][0]) != reason
    }
    if not readings:
        return {}
    found = store_raw(session, source, origin, [(loc, payload, h) for h, (loc, payload, _) in readings.items()], True)
    return {found[h][0]: reason for h, (_, _, reason) in readings.items() if h in found.new}
