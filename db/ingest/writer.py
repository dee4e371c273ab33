"""Parsed rankings written to the store, with their prompts, candidates and annotators.

Every ranking import writes through here, whichever format it read: JSON Lines
(`preflab.db.ingest.jsonl`) and the public datasets (`preflab.db.ingest.datasets.batch`).
A ranking is identified by its annotator, its criterion and its external id within its source, so a
ranking stored before, or met twice in one call, is counted a duplicate and written once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from preflab.db.bulk import append_rows, lookup
from preflab.db.conversation import prompt_columns, reply_columns
from preflab.db.ingest.records import RankingRecord
from preflab.db.ingest.summary import ImportCounts
from preflab.db.models import Ranking, RankingItem
from preflab.db.store import ensure_annotators, ensure_candidates, ensure_criteria, ensure_prompts

__all__ = ["store_prompts_and_candidates", "write_rankings"]


def store_prompts_and_candidates(session: Session, records: list[tuple[Any, ...]], summary: ImportCounts):
    """Get or create the prompts and candidates of parsed records; returns the id maps."""
    prompt_rows: dict[str, dict[str, Any]] = {}
    for rec, *_ in records:
        row = prompt_rows.get(rec.prompt_hash)
        if row is None:
            prompt_rows[rec.prompt_hash] = {
                **prompt_columns(rec.prompt),
                "source": rec.source,
                "reference": rec.reference,
            }
        elif row["reference"] is None and rec.reference:
            row["reference"] = rec.reference
    prompt_ids = ensure_prompts(session, prompt_rows, append=True)
    summary.prompts += prompt_ids.created

    cand_rows: dict[tuple[int, str], dict[str, Any]] = {}
    for rec, *_ in records:
        pid = prompt_ids[rec.prompt_hash]
        for turns, h, model in zip(rec.responses, rec.response_hashes, rec.models):
            if (pid, h) not in cand_rows:
                cand_rows[pid, h] = {**reply_columns(turns), "model": model}
    cand_ids = ensure_candidates(
        session, cand_rows, append=True, fresh_prompts={prompt_ids[h] for h in prompt_ids.fresh}
    )
    summary.candidates += cand_ids.created
    return prompt_ids, cand_ids


def write_rankings(
    session: Session, parsed: list[tuple[RankingRecord, str, int]], source: str, summary: ImportCounts
) -> list[RankingRecord]:
    """Store parsed rankings, with their prompts, candidates and annotators, inside the caller's transaction.

    `parsed` holds (record, payload hash, raw record id). A ranking is identified by
    its annotator, its criterion and its external id (the caller sets it: the record's own id, else
    `preflab.db.ingest.identity.record_identity`) within `source`: one stored before,
    or met earlier in `parsed`, is counted a duplicate. Each
    ranking item keeps the model the record names for its reply (`RankingItem.model`).
    Returns the records written; `summary` counts the duplicates and the new prompts and candidates.
    """
    if not parsed:
        return []
    prompt_ids, cand_ids = store_prompts_and_candidates(session, parsed, summary)
    annotator_ids = ensure_annotators(
        session,
        {(rec.kind, rec.annotator): ({"judge_kind": "import"} if rec.kind == "ai" else {}) for rec, *_ in parsed},
    )

    ensure_criteria(session, {rec.criterion for rec, *_ in parsed})

    keyed: dict[tuple[int, str, str], tuple[RankingRecord, int]] = {}
    for rec, _, raw_id in parsed:
        key = (annotator_ids[(rec.kind, rec.annotator)], rec.criterion, rec.external_id)
        if key in keyed:
            summary.duplicates += 1
            continue
        keyed[key] = (rec, raw_id)
    existing = {
        (aid, criterion, ext)
        for aid, criterion, ext, src in lookup(
            session,
            Ranking.__table__,
            ("annotator_id", "criterion", "external_id", "source"),
            "external_id",
            [ext for *_, ext in keyed],
        )
        if src == source
    }
    existing &= set(keyed)
    summary.duplicates += len(existing)
    new = [(key, rec, raw_id) for key, (rec, raw_id) in keyed.items() if key not in existing]
    if not new:
        return []

    ranking_rows = []
    # (candidate id, tier, shown position, score, model) per response, in shown order. The model is the record's
    # own: the candidate, shared by every ranking of its prompt and text, keeps the first import's.
    items_per_ranking = []
    for (annotator_id, criterion, external_id), rec, raw_id in new:
        pid = prompt_ids[rec.prompt_hash]
        cids = [cand_ids[(pid, h)] for h in rec.response_hashes]
        tier_of: list[int | None] = [None] * len(cids)
        for t, tier in enumerate(rec.tiers):
            for index in tier:
                tier_of[index] = t
        items_per_ranking.append(
            list(
                zip(cids, tier_of, range(len(cids)), rec.scores or [None] * len(cids), rec.models or [None] * len(cids))
            )
        )
        ranking_rows.append(
            {
                "prompt_id": pid,
                "annotator_id": annotator_id,
                "source": source,
                "external_id": external_id,
                "version": 1,
                "criterion": criterion,
                "status": "valid",
                "n_tiers": len(rec.tiers),
                "same_as_shown": False,
                "raw_record_id": raw_id,
                "details": rec.details,
            }
        )
    ids = append_rows(session, Ranking.__table__, ranking_rows)
    append_rows(
        session,
        RankingItem.__table__,
        [(rid, *item) for rid, items in zip(ids, items_per_ranking) for item in items],
        columns=("ranking_id", "candidate_id", "tier", "shown_position", "score", "model"),
        new_ids=False,
    )
    return [rec for _, rec, _ in new]
