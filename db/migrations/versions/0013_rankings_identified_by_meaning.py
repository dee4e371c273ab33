"""imported rankings are identified by what they mean: duplicates retired, payload-hash ids re-keyed

Before, a dataset row or a JSON Lines ranking without an id of its own was identified by the SHA-256
of its raw bytes, so the same rows in another encoding (Parquet then JSON Lines, other spacing or key
order, 7 against 7.0) were stored again. Now its identity is what it means (preflab.db.ingest.identity):
the dataset's id where the row has one, else a hash of the parsed ranking. This migration brings a store
to that: every valid imported ranking whose external id is its raw record's payload hash (or
`<hash>:<i>`) gets its identity, computed from what the store holds of it; in each group of rankings of
one annotator, source and identity the first is kept (re-keyed to the identity, so a later import is
recognised) and the others are retired, status `duplicate`, with `duplicate_of` (the id kept) added to
their details. No raw record and no ranking is deleted; the next `pairs build` drops the retired ones'
pairs. It says how many it retired and re-keyed (`preflab db upgrade` prints it).

What the identity hashes is frozen here, so that this migration does what it did whatever the live code
becomes. A reply's model is the one its ranking item names (0011); a ranking whose items name none
(written before 0011) takes its candidates' models. Downgrading gives the retired rankings back their
status `valid` (re-keyed ids stay: they are what the rankings mean).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

import hashlib
import logging
import math
from collections import defaultdict
from datetime import datetime, timezone

import orjson
import sqlalchemy as sa
from alembic import context, op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

log = logging.getLogger("preflab.db.migrations")
CHUNK = 2000
ID_LIMIT = 200  # rankings.external_id's width
DUPLICATE = "duplicate"

rankings = sa.table(
    "rankings",
    sa.column("id", sa.Integer),
    sa.column("prompt_id", sa.Integer),
    sa.column("annotator_id", sa.Integer),
    sa.column("source", sa.String),
    sa.column("external_id", sa.String),
    sa.column("version", sa.Integer),
    sa.column("status", sa.String),
    sa.column("raw_record_id", sa.Integer),
    sa.column("details", sa.JSON(none_as_null=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
items = sa.table(
    "ranking_items",
    sa.column("ranking_id", sa.Integer),
    sa.column("candidate_id", sa.Integer),
    sa.column("tier", sa.Integer),
    sa.column("shown_position", sa.Integer),
    sa.column("score", sa.Float),
    sa.column("model", sa.String),
)
candidates = sa.table(
    "candidates", sa.column("id", sa.Integer), sa.column("content_hash", sa.String), sa.column("model", sa.String)
)
prompts = sa.table("prompts", sa.column("id", sa.Integer), sa.column("content_hash", sa.String))
annotators = sa.table(
    "annotators", sa.column("id", sa.Integer), sa.column("kind", sa.String), sa.column("name", sa.String)
)
raw_records = sa.table(
    "raw_records",
    sa.column("id", sa.Integer),
    sa.column("source", sa.String),
    sa.column("payload", sa.Text),
    sa.column("payload_bytes", sa.LargeBinary),
    sa.column("payload_hash", sa.String),
)


# --- the identity, as preflab.db.ingest.identity computed it at this revision ---------------------


def _canonical(value):
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        out = {str(k): _canonical(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _json(value) -> bytes:
    return orjson.dumps(_canonical(value), option=orjson.OPT_SORT_KEYS)


def _content_identity(fmt, kind, annotator, prompt, replies, details) -> str:
    body = {
        "format": fmt,
        "annotator": [kind, annotator],
        "prompt": prompt,
        "replies": sorted(([h, m, t, s] for h, m, t, s in replies), key=_json),
        "details": details,
    }
    return hashlib.sha256(_json(body)).hexdigest()


def _pair_identity(dataset_id, chosen: str, rejected: str):
    if isinstance(dataset_id, float) and dataset_id.is_integer():
        dataset_id = int(dataset_id)
    if isinstance(dataset_id, bool) or not isinstance(dataset_id, (str, int)) or not str(dataset_id).strip():
        return None
    out = f"{dataset_id}:{hashlib.sha256(f'{chosen}>{rejected}'.encode()).hexdigest()[:16]}"
    return out if len(out) <= ID_LIMIT else None


def _prompt_id(payload: str | None, data: bytes | None):
    """A trl row's `prompt_id`, read from its raw record (None where it has none or is not a JSON object)."""
    try:
        row = orjson.loads(data if data is not None else (payload or "").removeprefix("\ufeff"))
    except orjson.JSONDecodeError:
        return None
    return row.get("prompt_id") if isinstance(row, dict) else None


# --- finding the rankings keyed by their bytes ------------------------------------------------------


def _by_payload(external_id: str, payload_hash: str) -> bool:
    """Whether an external id is the payload hash the import fell back to (`<hash>`, or `<hash>:<i>` in a row)."""
    rest = external_id[len(payload_hash) :]
    return external_id.startswith(payload_hash) and (rest == "" or (rest[:1] == ":" and rest[1:].isdigit()))


def _chunks(bind):
    """The valid imported rankings, CHUNK at a time by id, with their raw record's source and payload hash."""
    last = 0
    while True:
        rows = bind.execute(
            sa.select(
                rankings.c.id,
                rankings.c.annotator_id,
                rankings.c.source,
                rankings.c.external_id,
                rankings.c.prompt_id,
                rankings.c.details,
                rankings.c.raw_record_id,
                raw_records.c.source,
                raw_records.c.payload_hash,
            )
            .join(raw_records, raw_records.c.id == rankings.c.raw_record_id)
            .where(
                rankings.c.id > last,
                rankings.c.source.like("import%"),
                rankings.c.status == "valid",
                rankings.c.version == 1,
            )
            .order_by(rankings.c.id)
            .limit(CHUNK)
        ).all()
        if not rows:
            return
        last = rows[-1][0]
        yield [row for row in rows if _by_payload(row[3], row[8])]


def _identities(bind, rows, names) -> dict[int, str]:
    """ranking id -> its identity, for rankings keyed by their payload hash (rows of `_chunks`)."""
    ids = [row[0] for row in rows]
    replies = defaultdict(list)
    for rid, chash, model, fallback, tier, score, shown in bind.execute(
        sa.select(
            items.c.ranking_id,
            candidates.c.content_hash,
            items.c.model,
            candidates.c.model,
            items.c.tier,
            items.c.score,
            items.c.shown_position,
        )
        .join(candidates, candidates.c.id == items.c.candidate_id)
        .where(items.c.ranking_id.in_(ids))
    ):
        replies[rid].append((chash, model, fallback, tier, score, shown))
    hashes = sa.select(prompts.c.id, prompts.c.content_hash).where(prompts.c.id.in_({r[4] for r in rows}))
    prompt_hashes = dict(bind.execute(hashes).all())
    trl = {r[6] for r in rows if r[7] == "import:trl"}
    payloads = {}
    if trl:
        payloads = {
            rid: _prompt_id(text, data)
            for rid, text, data in bind.execute(
                sa.select(raw_records.c.id, raw_records.c.payload, raw_records.c.payload_bytes).where(
                    raw_records.c.id.in_(trl)
                )
            )
        }
    out = {}
    for rid, annotator_id, _source, _external, prompt_id, details, raw_id, raw_source, _hash in rows:
        mine = replies[rid]
        named = any(model is not None for _, model, *_ in mine)
        if raw_source == "import:trl" and len(mine) == 2:
            shown = sorted(mine, key=lambda item: item[5])
            pair = _pair_identity(payloads.get(raw_id), shown[0][0], shown[1][0])
            if pair is not None:
                out[rid] = pair
                continue
        kind, name = names[annotator_id]
        out[rid] = _content_identity(
            raw_source.removeprefix("import:"),
            kind,
            name,
            prompt_hashes[prompt_id],
            [(h, model if named else fallback, tier, score) for h, model, fallback, tier, score, _ in mine],
            details,
        )
    return out


def _holders(bind, wanted: dict[tuple[int, str, str], int]) -> dict[tuple[int, str, str], int]:
    """Of the identities wanted, those another ranking holds already as its external id: key -> its id."""
    found = {}
    keys = list(wanted)
    for start in range(0, len(keys), CHUNK):
        part = keys[start : start + CHUNK]
        for rid, annotator_id, source, external_id in bind.execute(
            sa.select(rankings.c.id, rankings.c.annotator_id, rankings.c.source, rankings.c.external_id).where(
                rankings.c.external_id.in_({k[2] for k in part}), rankings.c.version == 1
            )
        ):
            key = (annotator_id, source, external_id)
            if key in wanted and wanted[key] != rid:
                found[key] = rid
    return found


def _notes() -> list[str] | None:
    """Where this migration's counts go: the list `preflab db upgrade` prints (None: only the log)."""
    return context.config.attributes.get("notes")


def upgrade() -> None:
    bind = op.get_bind()
    names = {aid: (kind, name) for aid, kind, name in bind.execute(sa.select(annotators))}
    kept: dict[tuple[int, str, str], int] = {}  # (annotator, source, identity) -> the ranking kept
    retired: dict[int, tuple[tuple[int, str, str], dict | None]] = {}  # ranking id -> (its key, its details)
    for rows in _chunks(bind):
        identity = _identities(bind, rows, names) if rows else {}
        for rid, annotator_id, source, _external, _prompt, details, *_ in rows:
            key = (annotator_id, source, identity[rid])
            if key in kept:
                retired[rid] = (key, details)
            else:
                kept[key] = rid
    # An identity another ranking holds already (a dataset id it was stored under): that one is kept.
    holders = _holders(bind, kept)
    for key, holder in holders.items():
        rid = kept[key]
        retired[rid] = (key, bind.scalar(sa.select(rankings.c.details).where(rankings.c.id == rid)))
        kept[key] = holder
    now = datetime.now(timezone.utc)
    by_id = rankings.update().where(rankings.c.id == sa.bindparam("rid"))
    if retired:
        bind.execute(
            by_id,
            [
                {
                    "rid": rid,
                    "status": DUPLICATE,
                    "details": {**(details or {}), "duplicate_of": kept[key]},
                    "updated_at": now,
                }
                for rid, (key, details) in retired.items()
            ],
        )
    rekeyed = [
        {"rid": rid, "external_id": key[2], "updated_at": now} for key, rid in kept.items() if key not in holders
    ]
    if rekeyed:
        bind.execute(by_id, rekeyed)
    if not (retired or rekeyed):
        return
    line = (
        f"imported rankings are identified by what they mean now: {len(retired):,} duplicate "
        f"ranking{'s' if len(retired) != 1 else ''} retired (status duplicate, their raw records kept), "
        f"{len(rekeyed):,} re-keyed"
    )
    log.info(line)
    notes = _notes()
    if notes is not None:
        notes.append(line)


def downgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.select(rankings.c.id, rankings.c.details).where(rankings.c.status == DUPLICATE)).all()
    if rows:
        bind.execute(
            rankings.update().where(rankings.c.id == sa.bindparam("rid")),
            [
                {
                    "rid": rid,
                    "status": "valid",
                    "details": {k: v for k, v in (d or {}).items() if k != "duplicate_of"} or None,
                }
                for rid, d in rows
            ],
        )
