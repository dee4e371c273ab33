"""Bulk get-or-create of prompts, candidates and annotators, and raw-record storage.

Everything here works a batch at a time: one lookup of what exists, one
`INSERT … ON CONFLICT DO NOTHING` of what is missing, one `SELECT` to read the
new ids back. Both SQLite and Postgres do this natively, so re-running an import
never adds a row twice and never fails on a unique constraint, even when two
importers run at once. With `append=True` the missing rows are appended instead
(COPY on Postgres, with their ids drawn beforehand, so nothing is read back):
for callers whose transaction is run again when another writer added the same
row first (`preflab.db.engine.in_transaction`).
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.orm import Session

from preflab.db.bulk import append_rows, insert_rows, lookup
from preflab.db.models import Annotator, Candidate, Prompt, RawRecord, RawStatus
from preflab.errors import NotFound

# Keep every IN (...) well under SQLite's bound-parameter limit.
IN_CHUNK = 4000


def content_hash(text: str) -> str:
    """The identity of a prompt or response: SHA-256 of its NFC-normalised, stripped text."""
    return hashlib.sha256(unicodedata.normalize("NFC", text).strip().encode("utf-8")).hexdigest()


def payload_hash(payload: str | bytes) -> str:
    """The identity of a payload: SHA-256 of the bytes received (text is hashed as UTF-8)."""
    return hashlib.sha256(payload if isinstance(payload, bytes) else payload.encode("utf-8")).hexdigest()


def shown_payload(data: bytes) -> str:
    """Text standing in for bytes that text cannot hold (the bytes themselves are kept too)."""
    return data.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")


def insert_ignore(session: Session, table: Table, rows: Sequence[dict[str, Any]],
                  conflict: Sequence[str]) -> None:
    """Insert `rows`, skipping any that collide with an existing row on `conflict`."""
    insert_rows(session, table, rows, conflict)


def chunks(items: Sequence, size: int = IN_CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class IdMap(dict):
    """natural key -> id, plus how many of those rows this call created."""

    created: int = 0


def _ids(found: dict, created: int, index: int = 0) -> IdMap:
    out = IdMap({k: r[index] for k, r in found.items()})
    out.created = created
    return out


def _get_or_create(session: Session, table: Table, rows: dict[Any, dict[str, Any]], key: str,
                   columns: tuple[str, ...], row_key, conflict: Sequence[str],
                   append: bool = False) -> tuple[dict[Any, tuple], int]:
    """Look up `rows` (keyed by their natural key) by the `key` column, insert the missing
    ones (skipping any a concurrent writer added), read their ids back.

    With `append`, the missing rows are appended (`bulk.append_rows`) and not read back.
    Returns (natural key -> the looked-up row, number of rows this call created).
    """
    wanted = {row[key] for row in rows.values()}
    found = {row_key(r): r for r in lookup(session, table, columns, key, wanted)}
    new_keys = [k for k in rows if k not in found]
    missing = [rows[k] for k in new_keys]
    if missing and append:
        for rid, k in zip(append_rows(session, table, missing), new_keys):
            found[k] = (rid, *(rows[k][c] for c in columns[1:]))
    elif missing:
        insert_rows(session, table, missing, conflict)
        found.update({row_key(r): r for r in lookup(session, table, columns, key, {row[key] for row in missing})})
    return {k: found[k] for k in rows}, len(missing)


def ensure_prompts(session: Session, prompts: dict[str, dict[str, Any]], append: bool = False) -> IdMap:
    """Get or create prompts keyed by content hash; returns hash -> id (`.created`: how many are new).

    `prompts` maps hash -> column values (text, source, reference). An existing
    prompt without a reference gains one when the new record carries it.
    """
    if not prompts:
        return IdMap()
    optional = ("source", "reference", "iteration", "model_version_id")
    rows = {h: {"content_hash": h, "text": v["text"], **{c: v.get(c) for c in optional}}
            for h, v in prompts.items()}
    found, created = _get_or_create(session, Prompt.__table__, rows, "content_hash",
                                    ("id", "content_hash", "reference"), itemgetter(1), ["content_hash"], append)
    missing_reference = [{"id": r[0], "reference": rows[h]["reference"]}
                         for h, r in found.items() if r[2] is None and rows[h]["reference"]]
    if missing_reference:
        session.execute(update(Prompt), missing_reference)
    return _ids(found, created)


def ensure_candidates(session: Session, candidates: dict[tuple[int, str], dict[str, Any]],
                      append: bool = False) -> IdMap:
    """Get or create candidates keyed by (prompt id, content hash); returns key -> id (`.created`: new ones).

    Each value holds the candidate's columns: text, and optionally model,
    model_version_id, sampling, iteration.
    """
    if not candidates:
        return IdMap()
    optional = ("model", "model_version_id", "sampling", "iteration")
    rows = {(pid, h): {"prompt_id": pid, "content_hash": h, "text": v["text"], **{c: v.get(c) for c in optional}}
            for (pid, h), v in candidates.items()}
    found, created = _get_or_create(session, Candidate.__table__, rows, "prompt_id",
                                    ("id", "prompt_id", "content_hash"), itemgetter(1, 2),
                                    ["prompt_id", "content_hash"], append)
    return _ids(found, created)


def new_pseudonym(kind: str) -> str:
    """A stable, unguessable public name: it is stored, not derived from the real name."""
    return f"{kind}-{secrets.token_hex(6)}"


def ensure_annotators(session: Session, annotators: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], int]:
    """Get or create annotators keyed by (kind, name); returns key -> id.

    Each value holds extra columns (judge_kind, model, config, ls_user_id) used
    when the annotator is created.
    """
    if not annotators:
        return {}
    columns = ("judge_kind", "model", "config", "ls_user_id")
    rows = {(kind, name): {"kind": kind, "name": name, "pseudonym": new_pseudonym(kind),
                           **{c: values.get(c) for c in columns}}
            for (kind, name), values in annotators.items()}
    found, _ = _get_or_create(session, Annotator.__table__, rows, "name", ("id", "kind", "name"),
                              itemgetter(1, 2), ["kind", "name"])
    return {k: r[0] for k, r in found.items()}


class RawMap(dict):
    """payload hash -> (raw record id, status), plus the hashes this call stored for the first time."""

    new: frozenset[str] = frozenset()


def _raw_row(source: str, origin: str | None, locator: str, payload: str | bytes, digest: str) -> dict[str, Any]:
    text, data = (payload, None) if isinstance(payload, str) else (shown_payload(payload), payload)
    # Cut to the columns' widths: a locator or origin only points to where the payload came from.
    origin, locator = (origin[-500:] if origin else origin), (locator[:200] if locator else locator)
    return {"source": source, "origin": origin, "locator": locator, "payload": text, "payload_bytes": data,
            "payload_hash": digest, "status": RawStatus.ok.value}


def store_raw(session: Session, source: str, origin: str | None,
              payloads: Sequence[tuple[str, str | bytes] | tuple[str, str | bytes, str]], append: bool = False) -> RawMap:
    """Store payloads as received, before parsing; returns payload hash -> (id, status).

    `payloads` holds (locator, payload) or (locator, payload, hash): text, or bytes
    where text cannot hold what was received (kept exactly, in `payload_bytes`);
    the hash is given where the payload is only the start of what was received.
    A payload stored before keeps its row (and its status): storing is idempotent.
    `append`: the new rows are appended (see the module's docstring).
    """
    rows = {}
    for locator, payload, *given in payloads:
        h = given[0] if given else payload_hash(payload)
        if h not in rows:
            rows[h] = _raw_row(source, origin, locator, payload, h)
    if not rows:
        return RawMap()
    columns = ("id", "payload_hash", "status", "source")
    found = RawMap()
    for rid, h, status, src in lookup(session, RawRecord.__table__, columns, "payload_hash", rows):
        if src == source:
            found[h] = (rid, status)
    missing = [row for h, row in rows.items() if h not in found]
    if missing and append:
        found.update({row["payload_hash"]: (rid, row["status"])
                      for rid, row in zip(append_rows(session, RawRecord.__table__, missing), missing)})
    elif missing:
        insert_rows(session, RawRecord.__table__, missing, ["source", "payload_hash"])
        for rid, h, status, src in lookup(session, RawRecord.__table__, columns, "payload_hash",
                                          [row["payload_hash"] for row in missing]):
            if src == source:
                found[h] = (rid, status)
    found.new = frozenset(row["payload_hash"] for row in missing)
    return found


def quarantine(session: Session, reasons: dict[int, str]) -> None:
    """Mark raw records as quarantined with the reason each could not be used."""
    if not reasons:
        return
    session.execute(update(RawRecord), [
        {"id": rid, "status": RawStatus.quarantined.value, "reason": reason} for rid, reason in reasons.items()
    ])


def quarantined_records(session: Session, source: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The quarantined raw records, oldest first: id, source, origin, locator and reason."""
    query = (select(RawRecord).where(RawRecord.status == RawStatus.quarantined.value)
             .order_by(RawRecord.id).limit(limit))
    if source:
        query = query.where(RawRecord.source == source)
    return [{"id": r.id, "source": r.source, "origin": r.origin, "locator": r.locator, "reason": r.reason}
            for r in session.scalars(query)]


def raw_record(session: Session, record_id: int) -> dict[str, Any]:
    """One raw record with its payload exactly as received (`payload`: bytes).

    Raises:
        NotFound: no raw record has this id.
    """
    record = session.get(RawRecord, record_id)
    if record is None:
        raise NotFound(f"there is no raw record #{record_id} (see `preflab quarantine list`)")
    data = record.payload_bytes if record.payload_bytes is not None else record.payload.encode("utf-8")
    return {"id": record.id, "source": record.source, "origin": record.origin, "locator": record.locator,
            "status": record.status, "reason": record.reason, "received_at": record.received_at.isoformat(),
            "payload": data}
