"""Bulk get-or-create of prompts, candidates and annotators, and raw-record storage.

Everything here works a batch at a time: one `INSERT … ON CONFLICT DO NOTHING`
per table, then one `SELECT` to read the ids back. Both SQLite and Postgres do
this natively, so re-running an import never adds a row twice and never fails on
a unique constraint, even when two importers run at once.
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Table, select, tuple_, update
from sqlalchemy.orm import Session

from preflab.db.models import Annotator, Candidate, Prompt, RawRecord, RawStatus

# Keep every IN (...) well under SQLite's bound-parameter limit.
IN_CHUNK = 4000


def content_hash(text: str) -> str:
    """The identity of a prompt or response: SHA-256 of its NFC-normalised, stripped text."""
    return hashlib.sha256(unicodedata.normalize("NFC", text).strip().encode("utf-8")).hexdigest()


def payload_hash(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def insert_ignore(session: Session, table: Table, rows: Sequence[dict[str, Any]],
                  conflict: Sequence[str]) -> None:
    """Insert `rows`, skipping any that collide with an existing row on `conflict`."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:  # pragma: no cover - other databases are not supported
        raise NotImplementedError(f"preflab supports SQLite and Postgres, not {dialect}")
    stmt = insert(table).on_conflict_do_nothing(index_elements=list(conflict))
    session.execute(stmt, list(rows))


def chunks(items: Sequence, size: int = IN_CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def ensure_prompts(session: Session, prompts: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Get or create prompts keyed by content hash; returns hash -> id.

    `prompts` maps hash -> column values (text, source, reference...). An existing
    prompt without a reference gains one when the new record carries it.
    """
    if not prompts:
        return {}
    hashes = list(prompts)
    insert_ignore(session, Prompt.__table__,
                  [{"content_hash": h, **values} for h, values in prompts.items()], ["content_hash"])
    ids: dict[str, int] = {}
    missing_reference: list[int] = []
    for part in chunks(hashes):
        for pid, h, reference in session.execute(
            select(Prompt.id, Prompt.content_hash, Prompt.reference).where(Prompt.content_hash.in_(part))
        ):
            ids[h] = pid
            if reference is None and prompts[h].get("reference"):
                missing_reference.append(pid)
    if missing_reference:
        by_id = {ids[h]: h for h in hashes}
        session.execute(update(Prompt), [
            {"id": pid, "reference": prompts[by_id[pid]]["reference"]} for pid in missing_reference
        ])
    return ids


def ensure_candidates(session: Session, candidates: dict[tuple[int, str], dict[str, Any]]) -> dict[tuple[int, str], int]:
    """Get or create candidates keyed by (prompt id, content hash); returns key -> id."""
    if not candidates:
        return {}
    insert_ignore(session, Candidate.__table__, [
        {"prompt_id": pid, "content_hash": h, **values} for (pid, h), values in candidates.items()
    ], ["prompt_id", "content_hash"])
    keys = list(candidates)
    ids: dict[tuple[int, str], int] = {}
    for part in chunks(keys, IN_CHUNK // 2):
        for cid, pid, h in session.execute(
            select(Candidate.id, Candidate.prompt_id, Candidate.content_hash)
            .where(tuple_(Candidate.prompt_id, Candidate.content_hash).in_(part))
        ):
            ids[(pid, h)] = cid
    return ids


def new_pseudonym(kind: str) -> str:
    """A stable, unguessable public name: it is stored, not derived from the real name."""
    return f"{kind}-{secrets.token_hex(6)}"


def ensure_annotators(session: Session, annotators: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], int]:
    """Get or create annotators keyed by (kind, name); returns key -> id."""
    if not annotators:
        return {}
    keys = list(annotators)
    insert_ignore(session, Annotator.__table__, [
        {"kind": kind, "name": name, "pseudonym": new_pseudonym(kind), **values}
        for (kind, name), values in annotators.items()
    ], ["kind", "name"])
    ids: dict[tuple[str, str], int] = {}
    for part in chunks(keys, IN_CHUNK // 2):
        for aid, kind, name in session.execute(
            select(Annotator.id, Annotator.kind, Annotator.name).where(tuple_(Annotator.kind, Annotator.name).in_(part))
        ):
            ids[(kind, name)] = aid
    return ids


def store_raw(session: Session, source: str, origin: str | None,
              payloads: Sequence[tuple[str, str]]) -> dict[str, tuple[int, str]]:
    """Store payloads as received, before parsing; returns payload hash -> (id, status).

    `payloads` holds (locator, payload text). A payload stored before keeps its
    row (and its status): storing is idempotent.
    """
    rows = {}
    for locator, payload in payloads:
        h = payload_hash(payload)
        rows.setdefault(h, {"source": source, "origin": origin, "locator": locator,
                            "payload": payload, "payload_hash": h, "status": RawStatus.ok.value})
    insert_ignore(session, RawRecord.__table__, list(rows.values()), ["source", "payload_hash"])
    out: dict[str, tuple[int, str]] = {}
    hashes = list(rows)
    for part in chunks(hashes):
        for rid, h, status in session.execute(
            select(RawRecord.id, RawRecord.payload_hash, RawRecord.status)
            .where(RawRecord.source == source, RawRecord.payload_hash.in_(part))
        ):
            out[h] = (rid, status)
    return out


def quarantine(session: Session, reasons: dict[int, str]) -> None:
    """Mark raw records as quarantined with the reason each could not be used."""
    if not reasons:
        return
    session.execute(update(RawRecord), [
        {"id": rid, "status": RawStatus.quarantined.value, "reason": reason} for rid, reason in reasons.items()
    ])
