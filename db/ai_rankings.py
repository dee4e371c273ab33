"""An AI annotator's ranking of one prompt's candidates, written with its items: judges and best-of-n write here.

A ranking with tiers (best first) is `valid` and supersedes the annotator's older valid rankings of the
prompt. One with no tiers is the annotator's abstention (it read too little to rank): stored with status
`skipped`, what it read kept in its items' details, superseding nothing and giving no pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Ranking, RankingItem, RankingStatus


def write_ai_ranking(
    session: Session,
    *,
    annotator_id: int,
    prompt_id: int,
    source: str,
    external_id: str,
    run_id: str,
    tiers: Sequence[Sequence[int]],
    items: Sequence[dict[str, Any]],
    within_source: bool = False,
    criterion: str = OVERALL,
) -> tuple[int, int]:
    """Store the ranking and one item per candidate; returns (ranking id, rankings it superseded).

    Args:
        tiers: candidate ids, best first; empty: an abstention.
        items: per candidate shown, `candidate_id`, `shown_position`, `score` and `details`; a candidate in
            no tier is stored unranked (no tier).
        within_source: supersede only the annotator's rankings from `source` (best-of-n's annotator is named
            after its reward model, which may rank elsewhere too); else all its valid rankings of the prompt.
        criterion: what the ranking orders by; it supersedes only the annotator's rankings of that criterion.
    """
    tier_of = {c: t for t, tier in enumerate(tiers) for c in tier}
    superseded = 0
    if tiers:
        older = update(Ranking).where(
            Ranking.annotator_id == annotator_id,
            Ranking.prompt_id == prompt_id,
            Ranking.status == RankingStatus.valid.value,
            Ranking.criterion == criterion,
        )
        if within_source:
            older = older.where(Ranking.source == source)
        superseded = session.execute(older.values(status=RankingStatus.superseded.value)).rowcount
    ranking_id = session.execute(
        insert(Ranking)
        .values(
            prompt_id=prompt_id,
            annotator_id=annotator_id,
            source=source,
            external_id=external_id,
            version=1,
            criterion=criterion,
            status=(RankingStatus.valid if tiers else RankingStatus.skipped).value,
            n_tiers=len(tiers),
            same_as_shown=False,
            judge_run=run_id,
        )
        .returning(Ranking.id)
    ).scalar_one()
    session.execute(
        insert(RankingItem),
        [
            {
                "ranking_id": ranking_id,
                "candidate_id": item["candidate_id"],
                "tier": tier_of.get(item["candidate_id"]),
                "shown_position": item["shown_position"],
                "score": item["score"],
                "details": item["details"],
            }
            for item in items
        ],
    )
    return ranking_id, superseded
