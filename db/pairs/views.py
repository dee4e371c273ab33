"""Each prompt's valid rankings as tiers of candidate ids, streamed a prompt at a time, and grouped by criterion.

Aggregated pair builds, agreement, consensus and the judges' trust table read rankings this way: a
prompt's rankings together, never more than one prompt's in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Annotator, Ranking, RankingItem, RankingStatus

FETCH_BATCH = 20_000  # rows the stream fetches at a time


@dataclass
class RankedView:
    """One valid ranking as tiers of candidate ids (dense, best first)."""

    ranking_id: int
    annotator_id: int
    kind: str
    tiers: list[list[int]]
    criterion: str = OVERALL


def iter_prompt_rankings(
    session: Session, annotator_kind: str = "any", *, in_pairs_from: int | None = None
) -> Iterator[tuple[int, list[RankedView]]]:
    """Stream each prompt's valid rankings, a prompt at a time, in id order.

    With `in_pairs_from`: instead, the rankings the comparisons hold, of prompts from that id on.
    """
    chosen = (
        (Ranking.status == RankingStatus.valid.value)
        if in_pairs_from is None
        else and_(Ranking.in_pairs, Ranking.prompt_id >= in_pairs_from)
    )
    query = (
        select(
            Ranking.prompt_id,
            Ranking.id,
            Ranking.annotator_id,
            Annotator.kind,
            Ranking.criterion,
            RankingItem.candidate_id,
            RankingItem.tier,
        )
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .join(RankingItem, RankingItem.ranking_id == Ranking.id)
        .where(chosen, RankingItem.tier.is_not(None))
        .order_by(Ranking.prompt_id, Ranking.id, RankingItem.tier, RankingItem.candidate_id)
        .execution_options(yield_per=FETCH_BATCH)
    )
    if annotator_kind != "any":
        query = query.where(Annotator.kind == annotator_kind)
    prompt: int | None = None
    views: list[RankedView] = []
    by_tier: dict[int, list[int]] = {}

    def close() -> None:
        if views:
            views[-1].tiers = [by_tier[t] for t in sorted(by_tier)]

    for prompt_id, ranking_id, annotator_id, kind, criterion, candidate_id, tier in session.execute(query):
        if prompt_id != prompt:
            close()
            if prompt is not None:
                yield prompt, views
            prompt, views = prompt_id, []
        if not views or views[-1].ranking_id != ranking_id:
            close()
            views.append(RankedView(ranking_id, annotator_id, kind, [], criterion))
            by_tier = {}
        by_tier.setdefault(tier, []).append(candidate_id)
    close()
    if prompt is not None:
        yield prompt, views


def by_criterion(views: list[RankedView]) -> dict[str, list[RankedView]]:
    """One prompt's rankings grouped by criterion, the criteria in name order."""
    out: dict[str, list[RankedView]] = {}
    for view in sorted(views, key=lambda v: v.criterion):
        out.setdefault(view.criterion, []).append(view)
    return out
