"""Counts and inter-annotator agreement.

For every prompt ranked by two or more annotators, each pair of their rankings is
compared on the candidates both ranked: the pairwise agreement rate counts the
candidate pairs that both order strictly and that they order the same way, and
Kendall's tau-b (tie-aware) measures rank correlation. Results are reported for
all pairs of rankings and separately for human–human, AI–AI and human–AI.
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
    Annotator,
    Candidate,
    Comparison,
    DatasetVersion,
    ModelVersion,
    Prompt,
    Ranking,
    RawRecord,
    RawStatus,
)
from preflab.db.pairs.views import RankedView, iter_prompt_rankings
from preflab.db.requests import engine_usage


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


def agreement(session: Session) -> dict[str, dict]:
    """Agreement over every prompt with rankings by two or more annotators."""
    groups: dict[str, Agreement] = defaultdict(Agreement)
    prompts_multi = 0
    for _, views in iter_prompt_rankings(session):
        if len({v.annotator_id for v in views}) < 2:
            continue
        prompts_multi += 1
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
    out = {name: groups[name].as_dict() for name in ("all", "human-human", "ai-ai", "human-ai")}
    out["all"]["prompts"] = prompts_multi
    return out


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
        "same_as_shown": count(Ranking.status == "valid", Ranking.same_as_shown.is_(True), model=Ranking),
        "comparisons": count(model=Comparison),
        "quarantined": count(RawRecord.status == RawStatus.quarantined.value, model=RawRecord),
        "dataset_versions": count(model=DatasetVersion),
        "model_versions": count(model=ModelVersion),
    }


def stats(session: Session) -> dict:
    """Counts, agreement and what model servers answered (what `preflab stats --json` prints)."""
    return {"counts": counts(session), "agreement": agreement(session), "engine": engine_usage(session)}
