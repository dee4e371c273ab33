"""The report's Criteria section: what each criterion holds, and how often two criteria disagree on one pair.

A store ranked by several criteria (helpfulness, harmlessness…) gets a row per criterion: its rankings,
the prompts and annotators behind them, and the pairs the last build made of them. Then the tension
between criteria: for every two criteria that both order a candidate pair of a prompt, how often they order
it the other way round. Each criterion's verdict on a pair is the majority of its valid rankings' strict
votes on it (a pair a criterion's rankings split evenly on is no verdict); the share is over the pairs both
criteria have a verdict on. Helpfulness and harmlessness pull apart on requests for harm: the share says how
much, on the store's own data.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations
from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from preflab.db.models import Annotator, Comparison, Criterion, Ranking, RankingStatus
from preflab.db.pairs.build import strict_pairs
from preflab.db.pairs.views import by_criterion, iter_prompt_rankings


def criteria_section(session: Session) -> dict[str, Any]:
    """{"criteria": a row per criterion with rankings, "tension": a row per two criteria sharing pairs}."""
    valid = Ranking.status == RankingStatus.valid.value
    counts = session.execute(
        select(
            Ranking.criterion,
            func.count(),
            func.count(distinct(Ranking.prompt_id)),
            func.count(distinct(Ranking.annotator_id)),
        )
        .where(valid)
        .group_by(Ranking.criterion)
        .order_by(Ranking.criterion)
    ).all()
    people = dict(
        session.execute(
            select(Ranking.criterion, func.count(distinct(Ranking.annotator_id)))
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(valid, Annotator.kind == "human")
            .group_by(Ranking.criterion)
        ).all()
    )
    pairs = dict(session.execute(select(Comparison.criterion, func.count()).group_by(Comparison.criterion)).all())
    described = dict(session.execute(select(Criterion.name, Criterion.description)).all())
    rows = [
        {
            "name": name,
            "description": described.get(name),
            "rankings": rankings,
            "prompts": prompts,
            "annotators": annotators,
            "people": people.get(name, 0),
            "pairs": pairs.get(name, 0),
        }
        for name, rankings, prompts, annotators in counts
    ]
    return {"criteria": rows, "tension": tension(session) if len(rows) > 1 else []}


def tension(session: Session) -> list[dict[str, Any]]:
    """For every two criteria: the candidate pairs both have a verdict on, and the share they order oppositely."""
    shared: Counter[tuple[str, str]] = Counter()
    opposed: Counter[tuple[str, str]] = Counter()
    for _, views in iter_prompt_rankings(session):
        verdicts = {
            criterion: verdicts_of([v.tiers for v in group]) for criterion, group in by_criterion(views).items()
        }
        for a, b in combinations(sorted(verdicts), 2):
            for pair in verdicts[a].keys() & verdicts[b].keys():
                shared[a, b] += 1
                opposed[a, b] += verdicts[a][pair] != verdicts[b][pair]
    return [
        {"a": a, "b": b, "shared_pairs": n, "opposed": opposed[a, b], "share": opposed[a, b] / n}
        for (a, b), n in sorted(shared.items())
    ]


def verdicts_of(rankings: list[list[list[int]]]) -> dict[tuple[int, int], int]:
    """(lower id, higher id) -> +1 when the majority of the rankings' strict votes put the lower id first, -1 else."""
    votes: dict[tuple[int, int], int] = defaultdict(int)
    for tiers in rankings:
        for better, worse in strict_pairs(tiers):
            votes[min(better, worse), max(better, worse)] += 1 if better < worse else -1
    return {pair: 1 if net > 0 else -1 for pair, net in votes.items() if net}
