"""Rankings written as a store before revision 0014 held them: no criterion, the unique key without it.

The live writer (`preflab.db.ingest.writer.write_rankings`) writes a ranking's criterion, which a store
at an older revision has no column for; the migration tests build their old stores through this instead.
Prompts, candidates, annotators and raw records are written by the live code: their tables did not change.
"""

from __future__ import annotations

import sqlalchemy as sa

from preflab.db.ingest.identity import tiers_by_reply
from preflab.db.ingest.records import RankingRecord
from preflab.db.ingest.summary import ImportCounts
from preflab.db.ingest.writer import store_prompts_and_candidates
from preflab.db.store import ensure_annotators

RANKINGS = sa.table(
    "rankings",
    sa.column("id", sa.Integer),
    sa.column("prompt_id", sa.Integer),
    sa.column("annotator_id", sa.Integer),
    sa.column("source", sa.String),
    sa.column("external_id", sa.String),
    sa.column("version", sa.Integer),
    sa.column("status", sa.String),
    sa.column("n_tiers", sa.Integer),
    sa.column("same_as_shown", sa.Boolean),
    sa.column("raw_record_id", sa.Integer),
    sa.column("details", sa.JSON(none_as_null=True)),
    sa.column("in_pairs", sa.Boolean),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
ITEMS = sa.table(
    "ranking_items",
    sa.column("ranking_id", sa.Integer),
    sa.column("candidate_id", sa.Integer),
    sa.column("tier", sa.Integer),
    sa.column("shown_position", sa.Integer),
    sa.column("score", sa.Float),
    sa.column("model", sa.String),
)


def write_old_rankings(session, parsed: list[tuple[RankingRecord, str, int]], source: str) -> int:
    """Store (record, payload hash, raw record id) as rankings of a store below 0014; returns how many were new."""
    from preflab.db.models import utcnow

    prompt_ids, cand_ids = store_prompts_and_candidates(session, parsed, ImportCounts())
    annotators = ensure_annotators(
        session,
        {(r.kind, r.annotator): ({"judge_kind": "import"} if r.kind == "ai" else {}) for r, *_ in parsed},
    )
    written = 0
    for rec, _, raw_id in parsed:
        annotator_id = annotators[(rec.kind, rec.annotator)]
        held = session.execute(
            sa.select(RANKINGS.c.id).where(
                RANKINGS.c.annotator_id == annotator_id,
                RANKINGS.c.external_id == rec.external_id,
                RANKINGS.c.source == source,
            )
        ).first()
        if held is not None:
            continue
        now = utcnow()
        pid = prompt_ids[rec.prompt_hash]
        rid = session.execute(
            RANKINGS.insert()
            .values(
                prompt_id=pid,
                annotator_id=annotator_id,
                source=source,
                external_id=rec.external_id,
                version=1,
                status="valid",
                n_tiers=len(rec.tiers),
                same_as_shown=False,
                raw_record_id=raw_id,
                details=rec.details,
                in_pairs=False,
                created_at=now,
                updated_at=now,
            )
            .returning(RANKINGS.c.id)
        ).scalar_one()
        n = len(rec.response_hashes)
        session.execute(
            ITEMS.insert(),
            [
                {
                    "ranking_id": rid,
                    "candidate_id": cand_ids[(pid, h)],
                    "tier": tier,
                    "shown_position": i,
                    "score": score,
                    "model": model,
                }
                for i, (h, tier, score, model) in enumerate(
                    zip(rec.response_hashes, tiers_by_reply(rec.tiers, n), rec.scores or [None] * n, rec.models)
                )
            ],
        )
        written += 1
    return written
