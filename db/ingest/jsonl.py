"""Import rankings and prompts from JSON Lines, a batch per transaction.

The file is read as bytes, a line at a time (`preflab.db.ingest.lines`). Each line is
stored raw first, exactly as received; then parsed (`preflab.db.ingest.records`); a
line that cannot be used is quarantined with the reason and the rest of the
batch still imports. A ranking is identified by its `id` (or, without one, by what
it means: `preflab.db.ingest.identity`, whatever the line's spacing, key order or
number spelling), its annotator and its criterion (the optional `criterion`: what
the order is by, `overall` where the line names none), so importing a file twice,
an overlapping file, or the same rankings written another way, adds nothing twice. Every line read
is counted once: imported, duplicate, quarantined or blank. What parsed is written by
`preflab.db.ingest.writer`, as every import's rankings are.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter, plural
from preflab.db.bulk import lookup
from preflab.db.ingest.batching import capped_batches
from preflab.db.ingest.identity import record_identity
from preflab.db.ingest.lines import Line, count_lines, open_input, read_lines, refuse_json_document
from preflab.db.ingest.records import PromptRecord, RankingRecord, parse_prompt, parse_ranking
from preflab.db.ingest.summary import ImportSummary
from preflab.db.ingest.upkeep import cycles_unchecked, sample_grown_tables
from preflab.db.ingest.writer import store_prompts_and_candidates, write_rankings
from preflab.db.models import Candidate, Prompt, RawStatus
from preflab.db.store import quarantine, shown_payload, store_raw
from preflab.db.transactions import in_transaction
from preflab.errors import InputError, Invalid

__all__ = [
    "BATCH_LINES",
    "PromptRecord",
    "RankingRecord",
    "import_file",
    "import_prompts_batch",
    "import_rankings_batch",
    "open_jsonl",
    "parse_prompt",
    "parse_ranking",
]

BATCH_LINES = 5000
BATCH_BYTES = 64 * 2**20  # a batch of long lines is cut short: memory stays bounded
RANKINGS = "rankings"  # the format a JSON Lines ranking's identity names (`record_identity`)


# --- reading files ----------------------------------------------------------------------


def open_jsonl(path: str | Path) -> TextIO:
    """A text handle on a JSON Lines file: decompressed, without its byte-order mark.

    Bytes that are not UTF-8 come through surrogate-escaped (parsing such a line fails).
    """
    return io.TextIOWrapper(open_input(path), encoding="utf-8-sig", errors="surrogateescape")


# --- importing a batch -----------------------------------------------------------------


def _parse_batch(
    session: Session, batch: list[Line], source: str, origin: str, parse: Callable[[str], Any], summary: ImportSummary
) -> list[tuple[Any, str, int, bool]]:
    """Store the batch raw, parse it, quarantine what fails.

    Returns (record, payload hash, raw record id, stored before) for every line that parsed.
    """
    lines = []
    for line in batch:
        summary.read += 1
        if line.blank:
            summary.blank += 1
        else:
            lines.append((line, line.payload(), line.digest or hashlib.sha256(line.data).hexdigest()))
    raw = store_raw(
        session, source, origin, [(str(line.number), payload, h) for line, payload, h in lines], append=True
    )
    reasons: dict[int, str] = {}
    parsed: list[tuple[Any, str, int, bool]] = []
    seen: set[str] = set()
    for line, payload, h in lines:
        if h in seen:  # the very same line twice in one batch: one raw record, quarantined or used once
            summary.duplicates += 1
            continue
        seen.add(h)
        raw_id, status = raw[h]
        try:
            record = parse(payload if isinstance(payload, str) else line.text())
        except Invalid as exc:
            if status == RawStatus.ok.value:
                reasons[raw_id] = str(exc)
            summary.count_quarantined(str(exc))
            continue
        parsed.append((record, h, raw_id, h not in raw.new))
    quarantine(session, reasons)
    return parsed


def import_rankings_batch(session: Session, batch: list[Line], origin: str, source: str = "import") -> ImportSummary:
    """Import one batch of JSON Lines rankings inside the caller's transaction."""
    summary = ImportSummary()
    parsed = _parse_batch(session, batch, f"import:{RANKINGS}", origin, parse_ranking, summary)
    for rec, *_ in parsed:
        rec.external_id = rec.external_id or record_identity(RANKINGS, rec)
    written = write_rankings(session, [(rec, h, raw_id) for rec, h, raw_id, _ in parsed], source, summary)
    summary.imported += len(written)
    return summary


def import_prompts_batch(session: Session, batch: list[Line], origin: str) -> ImportSummary:
    """Import one batch of JSON Lines prompts (optionally with unranked responses).

    A line that adds nothing is a duplicate: the same bytes stored before, or a
    prompt whose responses (and reference) are all stored already, however the
    line is spelled (other spacing, key order, escapes), here or earlier in the file.
    """
    summary = ImportSummary()
    parsed = _parse_batch(session, batch, "import:prompts", origin, parse_prompt, summary)
    if not parsed:
        return summary
    stored = _stored_before(session, [rec for rec, *_ in parsed])
    store_prompts_and_candidates(session, parsed, summary)
    duplicates = 0
    for rec, _, _, same_bytes in parsed:
        news = {("prompt", rec.prompt_hash)} | {(rec.prompt_hash, h) for h in rec.response_hashes}
        if rec.reference:
            news.add(("reference", rec.prompt_hash))
        if same_bytes or news <= stored:
            duplicates += 1
        stored |= news  # a later line holding only these adds nothing either
    summary.duplicates += duplicates
    summary.imported += len(parsed) - duplicates
    return summary


def _stored_before(session: Session, records: list[Any]) -> set[tuple[str, str]]:
    """What the database holds of these records: ("prompt", hash), ("reference", hash), (prompt hash, response hash)."""
    prompts = {
        h: (pid, reference)
        for h, pid, reference in lookup(
            session,
            Prompt.__table__,
            ("content_hash", "id", "reference"),
            "content_hash",
            [rec.prompt_hash for rec in records],
        )
    }
    out = {("prompt", h) for h in prompts} | {("reference", h) for h, (_, ref) in prompts.items() if ref}
    hash_of = {pid: h for h, (pid, _) in prompts.items()}
    out |= {
        (hash_of[pid], h)
        for pid, h in lookup(session, Candidate.__table__, ("prompt_id", "content_hash"), "prompt_id", list(hash_of))
    }
    return out


def import_file(
    sessions: sessionmaker[Session],
    path: str | Path,
    importer: Callable[[Session, list[Line], str], ImportSummary],
    reporter: Reporter = SILENT,
    batch_lines: int = BATCH_LINES,
) -> ImportSummary:
    """Import a JSON Lines file (plain or compressed) a batch per transaction.

    A crash keeps the batches done; a batch that loses a race with another writer
    is run again (`in_transaction`).

    Raises:
        InputError: the file cannot be read, is one JSON document rather than JSON Lines,
            or its compressed data is damaged part-way.
    """
    refuse_json_document(path)
    total = ImportSummary()
    # A file name is bytes: those that are not UTF-8 would reach the database as lone surrogates.
    origin = shown_payload(os.fsencode(Path(path).resolve()))[-500:]  # raw_records.origin holds 500 characters
    lines = count_lines(path) if reporter.enabled else None  # a second read, only for the bar
    with (
        open_input(path) as handle,
        reporter.progress(f"importing {Path(path).name}", lines) as advance,
        cycles_unchecked(),
    ):
        try:
            for batch in _import_batches(sessions, read_lines(handle, path), importer, origin, batch_lines):
                total.add(batch)
                advance(batch.read)
        except InputError as exc:
            raise InputError(f"{exc}; the {plural(total.read, 'line')} before the damage are stored") from None
    return total


def _import_batches(
    sessions: sessionmaker[Session], lines: Iterable[Line], importer, origin: str, batch_lines: int
) -> Iterator[ImportSummary]:
    """Import the lines a batch per transaction; yields each batch's summary once committed."""
    for number, batch in enumerate(capped_batches(lines, batch_lines, BATCH_BYTES, size=_line_bytes), 1):
        attempts = 0

        def attempt(session: Session) -> ImportSummary:
            nonlocal attempts
            attempts += 1
            return importer(session, batch, origin)  # noqa: B023 (called within this iteration)

        summary = in_transaction(sessions, attempt)
        summary.retried = attempts - 1
        sample_grown_tables(sessions, number)
        yield summary


def _line_bytes(line: Line) -> int:
    return len(line.data)
