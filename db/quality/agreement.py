"""Counts and inter-annotator agreement.

For every prompt ranked by two or more annotators, each pair of their rankings is
compared on the candidates both ranked: the pairwise agreement rate counts the
candidate pairs that both order strictly and that they order the same way, and
Kendall's tau-b (tie-aware) measures rank correlation. Results are reported for
all pairs of rankings and separately for human–human, AI–AI and human–AI.

Two rankings are compared only when they order by the same criterion (`Ranking.criterion`): a
helpfulness ranking and a harmlessness ranking of one prompt answer different questions, so
every number here is one criterion's, and `stats` gives one block per criterion.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from preflab.console import plural
from preflab.db.models import (
    OVERALL,
    Annotator,
    Candidate,
    Comparison,
    Criterion,
    DatasetVersion,
    ModelVersion,
    Prompt,
    Ranking,
    RankingStatus,
    RawRecord,
    RawStatus,
)
from preflab.db.pairs.views import RankedView, by_criterion, iter_prompt_rankings
from preflab.db.requests import engine_usage
from preflab.errors import InputError


def same_as_shown_text(n: int) -> str:
    """What `stats` and `ls sync` both count, said the same way: `3 valid rankings identical to the order shown`.

    A valid ranking whose order is the order the candidates were shown in (its
    annotator may have submitted without ranking); one later superseded or
    deleted no longer counts.
    """
    return f"{plural(n, 'valid ranking')} identical to the order shown"


@dataclass
class Agreement:
    ranking_pairs: int = 0
    shared_pairs: int = 0
    agreeing_pairs: int = 0
    taus: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "ranking_pairs": self.ranking_pairs,
            "shared_pairs": self.shared_pairs,
            "pairwise_agreement": self.agreeing_pairs / self.shared_pairs if self.shared_pairs else None,
            "kendall_tau": sum(self.taus) / len(self.taus) if self.taus else None,
        }


def compare_rankings(first: list[list[int]], second: list[list[int]]) -> tuple[int, int, float | None]:
    """(shared strict pairs, agreeing pairs, Kendall tau-b) on the candidates both ranked.

    Tau-b comes from the same pair counts (as scipy's `kendalltau(variant="b")`
    computes it, which tests check): calling scipy once per ranking pair cost the
    report minutes on a store with many judge rankings.
    """
    rank1 = {c: t for t, tier in enumerate(first) for c in tier}
    rank2 = {c: t for t, tier in enumerate(second) for c in tier}
    shared = sorted(rank1.keys() & rank2.keys())
    concordant = discordant = tied_first_only = tied_second_only = 0
    for x, y in combinations(shared, 2):
        d1, d2 = rank1[x] - rank1[y], rank2[x] - rank2[y]
        if d1 and d2:
            if (d1 > 0) == (d2 > 0):
                concordant += 1
            else:
                discordant += 1
        elif d2:
            tied_first_only += 1
        elif d1:
            tied_second_only += 1
    strict = concordant + discordant
    denominator = math.sqrt((strict + tied_first_only) * (strict + tied_second_only))
    tau = (concordant - discordant) / denominator if denominator else None
    return strict, concordant, tau


def _category(a: RankedView, b: RankedView) -> str:
    kinds = sorted((a.kind, b.kind))
    return {("human", "human"): "human-human", ("ai", "ai"): "ai-ai"}.get(tuple(kinds), "human-ai")


def criteria(session: Session) -> list[str]:
    """The criteria of the valid rankings, in name order; [overall] where there is none (an empty store)."""
    found = session.scalars(
        select(Ranking.criterion)
        .where(Ranking.status == RankingStatus.valid.value)
        .distinct()
        .order_by(Ranking.criterion)
    ).all()
    return list(found) or [OVERALL]


def chosen_criteria(session: Session, criterion: str | None = None) -> list[str]:
    """The criteria a command shows: `criterion` alone, else every criterion of the valid rankings.

    Raises:
        InputError: `criterion` is a name no ranking and no stored criterion has (a typo, most likely).
    """
    present = criteria(session)
    if criterion is None:
        return present
    known = criterion == OVERALL or criterion in present
    known = known or session.scalar(select(Criterion.name).where(Criterion.name == criterion)) is not None
    if not known:
        raise InputError(
            f"no ranking is of criterion {criterion!r} (the valid rankings' criteria: {', '.join(present)})"
        )
    return [criterion]


def agreement_by_criterion(session: Session, criterion: str | None = None) -> dict[str, dict[str, dict]]:
    """Agreement within each criterion (`chosen_criteria`): criterion -> what `agreement` gives for it.

    One pass over the rankings: each prompt's rankings are grouped by criterion and only rankings of
    one criterion are compared.
    """
    return _agreements(session, chosen_criteria(session, criterion))


def _agreements(session: Session, names: list[str]) -> dict[str, dict[str, dict]]:
    groups: dict[str, dict[str, Agreement]] = {name: defaultdict(Agreement) for name in names}
    prompts_multi = dict.fromkeys(names, 0)
    for _, views in iter_prompt_rankings(session):
        for name, same in by_criterion(views).items():
            if name in groups:
                prompts_multi[name] += _compare_all(same, groups[name])
    out = {}
    for name in names:
        out[name] = {group: groups[name][group].as_dict() for group in ("all", "human-human", "ai-ai", "human-ai")}
        out[name]["all"]["prompts"] = prompts_multi[name]
    return out


def _compare_all(views: list[RankedView], groups: dict[str, Agreement]) -> int:
    """Add every two rankings of one prompt (one criterion) by different annotators; 1 if there were any."""
    if len({v.annotator_id for v in views}) < 2:
        return 0
    for a, b in combinations(views, 2):
        if a.annotator_id == b.annotator_id:
            continue
        n_shared, agree, tau = compare_rankings(a.tiers, b.tiers)
        for name in ("all", _category(a, b)):
            group = groups[name]
            group.ranking_pairs += 1
            group.shared_pairs += n_shared
            group.agreeing_pairs += agree
            if tau is not None:
                group.taus.append(tau)
    return 1


def agreement(session: Session, criterion: str = OVERALL) -> dict[str, dict]:
    """Agreement over every prompt with rankings of `criterion` by two or more annotators."""
    return _agreements(session, [criterion])[criterion]


def counts(session: Session) -> dict:
    """Row counts of everything a user asks about first."""

    def count(*where, model=None):
        return session.scalar(select(func.count()).select_from(model).where(*where))

    # each grouping in the order of its key: the same text on SQLite and Postgres (a new user saw them differ)
    by_status = dict(
        session.execute(select(Ranking.status, func.count()).group_by(Ranking.status).order_by(Ranking.status)).all()
    )
    by_kind = dict(
        session.execute(
            select(Annotator.kind, func.count())
            .join(Ranking, Ranking.annotator_id == Annotator.id)
            .where(Ranking.status == "valid")
            .group_by(Annotator.kind)
            .order_by(Annotator.kind)
        ).all()
    )
    by_criterion = dict(
        session.execute(
            select(Ranking.criterion, func.count())
            .where(Ranking.status == RankingStatus.valid.value)
            .group_by(Ranking.criterion)
            .order_by(Ranking.criterion)
        ).all()
    )
    return {
        "prompts": count(model=Prompt),
        "candidates": count(model=Candidate),
        "annotators": dict(
            session.execute(
                select(Annotator.kind, func.count()).group_by(Annotator.kind).order_by(Annotator.kind)
            ).all()
        ),
        "rankings": {"total": sum(by_status.values()), **by_status},
        "valid_rankings_by_kind": by_kind,
        "valid_rankings_by_criterion": by_criterion,
        "same_as_shown": count(Ranking.status == "valid", Ranking.same_as_shown.is_(True), model=Ranking),
        "comparisons": count(model=Comparison),
        "quarantined": count(RawRecord.status == RawStatus.quarantined.value, model=RawRecord),
        "dataset_versions": count(model=DatasetVersion),
        "model_versions": count(model=ModelVersion),
    }


def stats(session: Session) -> dict:
    """Counts, the `overall` criterion's agreement and what model servers answered (the pipeline's summary)."""
    return {"counts": counts(session), "agreement": agreement(session), "engine": engine_usage(session)}


def criterion_stats(session: Session, criterion: str | None = None) -> dict:
    """What `preflab stats --json` prints: counts, agreement by criterion (`agreement_by_criterion`), engines."""
    return {
        "counts": counts(session),
        "agreement": agreement_by_criterion(session, criterion),
        "engine": engine_usage(session),
    }
