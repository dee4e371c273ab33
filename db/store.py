"""Bulk get-or-create of prompts, candidates, annotators and criteria, and raw-record storage.

Everything here works a batch at a time: one lookup of what exists, one
`INSERT … ON CONFLICT DO NOTHING` of what is missing, one `SELECT` to read the
new ids back. Both SQLite and Postgres do this natively, so re-running an import
never adds a row twice and never fails on a unique constraint, even when two
importers run at once. With `append=True` the missing rows are appended instead
(COPY on Postgres, with their ids drawn beforehand, so nothing is read back):
for callers whose transaction is run again when another writer added the same
row first (`preflab.db.transactions.in_transaction`).
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Table, func, select, update
from sqlalchemy.orm import Session

from preflab.db.bulk import append_rows, insert_rows, lookup
from preflab.db.models import Annotator, Candidate, Criterion, Prompt, RawRecord, RawStatus, utcnow
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


def insert_ignore(session: Session, table: Table, rows: Sequence[dict[str, Any]], conflict: Sequence[str]) -> None:
    """Insert `rows`, skipping any that collide with an existing row on `conflict`."""
    insert_rows(session, table, rows, conflict)


def chunks(items: Sequence, size: int = IN_CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class IdMap(dict):
    """natural key -> id, plus how many of those rows this call created (`fresh`: their keys, when appended)."""

    created: int = 0
    fresh: frozenset = frozenset()


def _get_or_create(
    session: Session,
    table: Table,
    wanted: Mapping[Any, Any],
    natural: tuple[str, ...],
    key: str,
    row_columns: tuple[str, ...],
    make_row,
    extra: tuple[str, ...] = (),
    append: bool = False,
    skip: Collection = (),
) -> tuple[IdMap, dict[Any, tuple]]:
    """Look up rows by their natural keys and insert the missing ones.

    `wanted` maps each natural key to what the caller gave for it. `natural` names
    the key's columns (its unique constraint; a key of one column is the bare value),
    and `key` the one of them the lookup goes by; the lookup reads the id, the
    natural key, then `extra`. Only a missing key gets a row built
    (`make_row(natural key, given)`: a tuple of `row_columns`, which start with the
    natural key's). The missing rows are inserted, skipping any a concurrent writer
    added, and their ids read back; with `append` they are appended
    (`bulk.append_rows`) and not read back. `skip`: values of the `key` column that
    cannot have rows yet (created in this transaction), so are not looked up.

    Returns natural key -> id, and natural key -> looked-up row (all but the appended ones).
    """
    columns, row_key = ("id", *natural, *extra), itemgetter(*range(1, len(natural) + 1))
    key_of = (lambda k: k) if len(natural) == 1 else itemgetter(natural.index(key))
    looked_up = {key_of(k) for k in wanted}.difference(skip)
    found = {row_key(r): r for r in lookup(session, table, columns, key, looked_up)}
    missing = [k for k in wanted if k not in found]
    appended = {}
    if missing and append:
        rows = [make_row(k, wanted[k]) for k in missing]
        appended = dict(zip(missing, append_rows(session, table, rows, columns=row_columns)))
    elif missing:
        insert_rows(session, table, [dict(zip(row_columns, make_row(k, wanted[k]))) for k in missing], natural)
        # Read back: rows this call inserted, and any a concurrent writer inserted first.
        found.update((row_key(r), r) for r in lookup(session, table, columns, key, {key_of(k) for k in missing}))
    existing = {k: found[k] for k in wanted if k in found}
    ids = IdMap((k, r[0]) for k, r in existing.items())
    ids.update(appended)
    ids.created, ids.fresh = len(missing), frozenset(appended)
    return ids, existing


_PROMPT_COLUMNS = ("content_hash", "text", "messages", "source", "reference", "iteration", "model_version_id")


def ensure_prompts(session: Session, prompts: dict[str, dict[str, Any]], append: bool = False) -> IdMap:
    """Get or create prompts keyed by content hash; returns hash -> id (`.created`: how many are new).

    `prompts` maps hash -> column values (text, and optionally messages, source,
    reference, iteration, model_version_id: `preflab.db.conversation.prompt_columns`
    gives text and messages, and `prompt_hash` the key). An existing prompt without a reference gains one when the
    new record carries it.
    """
    if not prompts:
        return IdMap()
    ids, existing = _get_or_create(
        session,
        Prompt.__table__,
        prompts,
        ("content_hash",),
        "content_hash",
        _PROMPT_COLUMNS,
        lambda h, v: (h, v["text"], *map(v.get, _PROMPT_COLUMNS[2:])),
        ("reference",),
        append,
    )
    missing_reference = [
        {"id": r[0], "reference": prompts[h]["reference"]}
        for h, r in existing.items()
        if r[2] is None and prompts[h].get("reference")
    ]
    if missing_reference:
        session.execute(update(Prompt), missing_reference)
    return ids


_CANDIDATE_COLUMNS = (
    "prompt_id",
    "content_hash",
    "text",
    "messages",
    "model",
    "model_version_id",
    "sampling",
    "iteration",
)


def ensure_candidates(
    session: Session,
    candidates: dict[tuple[int, str], dict[str, Any]],
    append: bool = False,
    fresh_prompts: Collection[int] = (),
) -> IdMap:
    """Get or create candidates keyed by (prompt id, content hash); returns key -> id (`.created`: new ones).

    Each value holds the candidate's columns: text, and optionally messages (a
    reply of several turns: `preflab.db.conversation.reply_columns`), model,
    model_version_id, sampling, iteration. `fresh_prompts`: ids of prompts this
    transaction created, which have no candidates to look up yet.
    """
    if not candidates:
        return IdMap()
    return _get_or_create(
        session,
        Candidate.__table__,
        candidates,
        ("prompt_id", "content_hash"),
        "prompt_id",
        _CANDIDATE_COLUMNS,
        lambda k, v: (*k, v["text"], *map(v.get, _CANDIDATE_COLUMNS[3:])),
        append=append,
        skip=fresh_prompts,
    )[0]


def new_pseudonym(kind: str) -> str:
    """A stable, unguessable public name: it is stored, not derived from the real name."""
    return f"{kind}-{secrets.token_hex(6)}"


def ensure_annotators(
    session: Session, annotators: dict[tuple[str, str], dict[str, Any]]
) -> dict[tuple[str, str], int]:
    """Get or create annotators keyed by (kind, name); returns key -> id.

    Each value holds extra columns (judge_kind, model, config, ls_user_id) used
    when the annotator is created.
    """
    if not annotators:
        return {}
    ids, _ = _get_or_create(
        session,
        Annotator.__table__,
        annotators,
        ("kind", "name"),
        "name",
        _ANNOTATOR_COLUMNS,
        lambda k, v: (*k, new_pseudonym(k[0]), *map(v.get, _ANNOTATOR_COLUMNS[3:])),
    )
    return dict(ids)


_ANNOTATOR_COLUMNS = ("kind", "name", "pseudonym", "judge_kind", "model", "config", "ls_user_id")


def ensure_criteria(session: Session, names: Iterable[str], descriptions: Mapping[str, str] | None = None) -> None:
    """Create the criteria of these names that are not there yet, with their descriptions where given.

    A criterion already stored keeps its description.
    """
    wanted = set(names) | set(descriptions or ())
    found = {name for (name,) in lookup(session, Criterion.__table__, ("name",), "name", wanted)}
    now = utcnow()
    insert_rows(
        session,
        Criterion.__table__,
        [{"name": n, "description": (descriptions or {}).get(n), "created_at": now} for n in sorted(wanted - found)],
        ("name",),
    )


class RawMap(dict):
    """payload hash -> (raw record id, status), plus the hashes this call stored for the first time."""

    new: frozenset[str] = frozenset()


def _raw_row(source: str, origin: str | None, locator: str, payload: str | bytes, digest: str) -> dict[str, Any]:
    text, data = (payload, None) if isinstance(payload, str) else (shown_payload(payload), payload)
    # Cut to the columns' widths: a locator or origin only points to where the payload came from.
    origin, locator = (origin[-500:] if origin else origin), (locator[:200] if locator else locator)
    return {
        "source": source,
        "origin": origin,
        "locator": locator,
        "payload": text,
        "payload_bytes": data,
        "payload_hash": digest,
        "status": RawStatus.ok.value,
    }


def store_raw(
    session: Session,
    source: str,
    origin: str | None,
    payloads: Sequence[tuple[str, str | bytes] | tuple[str, str | bytes, str]],
    append: bool = False,
) -> RawMap:
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
    if append and session.connection().dialect.name == "sqlite":
        return _append_unseen(session, source, rows)
    found = _stored_raw(session, source, rows)
    missing = [row for h, row in rows.items() if h not in found]
    if missing and append:
        found.update(
            {
                row["payload_hash"]: (rid, row["status"])
                for rid, row in zip(append_rows(session, RawRecord.__table__, missing), missing)
            }
        )
    elif missing:
        insert_rows(session, RawRecord.__table__, missing, ["source", "payload_hash"])
        found.update(_stored_raw(session, source, [row["payload_hash"] for row in missing]))
    found.new = frozenset(row["payload_hash"] for row in missing)
    return found


def _stored_raw(session: Session, source: str, hashes: Iterable[str]) -> RawMap:
    columns = ("id", "payload_hash", "status", "source")
    return RawMap(
        (h, (rid, status))
        for rid, h, status, src in lookup(session, RawRecord.__table__, columns, "payload_hash", hashes)
        if src == source
    )


def _append_unseen(session: Session, source: str, rows: dict[str, dict[str, Any]]) -> RawMap:
    """SQLite, appending: every row INSERTed, those stored before skipped (ON CONFLICT DO NOTHING).

    A first import stores without looking its hashes up first (0.24 s of a 6.3 s oasst2 import,
    bench/README.md, issue 30); only when some row was there before are they all looked up. The rows
    this call stored are those past the largest id before it (the transaction holds the write lock).
    """
    table = RawRecord.__table__
    before = session.scalar(select(func.max(table.c.id))) or 0
    ids = append_rows(session, table, list(rows.values()), skip=("payload_hash", "source"))
    if ids is None:
        found = _stored_raw(session, source, rows)
    else:
        found = RawMap((h, (rid, RawStatus.ok.value)) for h, rid in zip(rows, ids))
    found.new = frozenset(h for h, (rid, _) in found.items() if rid > before)
    return found


def quarantine(session: Session, reasons: dict[int, str]) -> None:
    """Mark raw records as quarantined with the reason each could not be used."""
    if not reasons:
        return
    session.execute(
        update(RawRecord),
        [{"id": rid, "status": RawStatus.quarantined.value, "reason": reason} for rid, reason in reasons.items()],
    )


def release(session: Session, ids: Collection[int]) -> None:
    """Mark quarantined raw records as used after all (what made them unusable was where they were, now fixed)."""
    if ids:
        session.execute(update(RawRecord), [{"id": rid, "status": RawStatus.ok.value, "reason": None} for rid in ids])


def quarantined_records(session: Session, source: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The quarantined raw records, oldest first: id, source, origin, locator and reason."""
    query = select(RawRecord).where(RawRecord.status == RawStatus.quarantined.value).order_by(RawRecord.id).limit(limit)
    if source:
        query = query.where(RawRecord.source == source)
    return [
        {"id": r.id, "source": r.source, "origin": r.origin, "locator": r.locator, "reason": r.reason}
        for r in session.scalars(query)
    ]


def raw_record(session: Session, record_id: int) -> dict[str, Any]:
    """One raw record with its payload exactly as received (`payload`: bytes).

    Raises:
        NotFound: no raw record has this id.
    """
    record = session.get(RawRecord, record_id)
    if record is None:
        raise NotFound(f"there is no raw record #{record_id} (see `preflab quarantine list`)")
    data = record.payload_bytes if record.payload_bytes is not None else record.payload.encode("utf-8")
    return {
        "id": record.id,
        "source": record.source,
        "origin": record.origin,
        "locator": record.locator,
        "status": record.status,
        "reason": record.reason,
        "received_at": record.received_at.isoformat(),
        "payload": data,
    }
