"""Rankings → pairwise comparisons.

A ranking with tiers T0 > T1 > … yields every (a, b) with a in an earlier tier
than b. Without aggregation the expansion is one `INSERT … SELECT` self-join of
`ranking_items`, so millions of pairs are written without leaving the database.
With aggregation, each prompt's valid rankings of one criterion are combined in
Python (streamed a prompt at a time) into a consensus and expanded the same way.
A pair carries its rankings' criterion: rankings by two criteria are never combined. A build rewrites
only what changed since the last one (`preflab.db.pairs.incremental`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Float, Numeric, and_, cast, func, insert, literal, select
from sqlalchemy.orm import Session

from preflab.db.bulk import refresh_statistics
from preflab.db.models import Annotator, Comparison, PairBuild, Ranking, RankingItem
from preflab.db.pairs.incremental import excluded_record, mark_and_clear, needs_full
from preflab.db.pairs.views import by_criterion, iter_prompt_rankings
from preflab.errors import InputError

STRATEGIES = ("all", "adjacent", "best-vs-rest", "best-vs-worst")
AGGREGATES = ("none", "majority", "borda", "bradley-terry")
KINDS = ("human", "ai", "any")
INSERT_BATCH = 20_000
MARGIN_DIGITS = 12  # decimals a margin keeps: enough for any score, none of a float's noise


# --- the pure part: tiers in, pairs out -------------------------------------------------


def expand_tiers(tiers: Sequence[Sequence[int]], strategy: str = "all") -> Iterator[tuple[int, int, int]]:
    """Yield (chosen, rejected, tier gap) for a ranking given as tiers, best first."""
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
    last = len(tiers) - 1
    for i, upper in enumerate(tiers):
        if strategy in ("best-vs-rest", "best-vs-worst") and i > 0:
            break
        for j in range(i + 1, len(tiers)):
            if strategy == "adjacent" and j != i + 1:
                break
            if strategy == "best-vs-worst" and j != last:
                continue
            for a in upper:
                for b in tiers[j]:
                    yield a, b, j - i


def tiers_from_scores(scores: dict[int, float], tolerance: float = 1e-9) -> list[list[int]]:
    """Group items into tiers by score, highest first; equal scores (within tolerance) tie."""
    tiers: list[list[int]] = []
    last: float | None = None
    for item, score in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])):
        if last is not None and abs(last - score) <= tolerance:
            tiers[-1].append(item)
        else:
            tiers.append([item])
        last = score
    return tiers


def strict_pairs(tiers: Sequence[Sequence[int]]) -> Iterator[tuple[int, int]]:
    for a, b, _ in expand_tiers(tiers, "all"):
        yield a, b


def majority(rankings: Sequence[Sequence[Sequence[int]]]) -> list[tuple[int, int, int, float]]:
    """Majority per pair: (chosen, rejected, wins − losses, share of votes) for strict majorities."""
    votes: dict[tuple[int, int], int] = defaultdict(int)
    for tiers in rankings:
        for a, b in strict_pairs(tiers):
            votes[(a, b)] += 1
    out = []
    for a, b in sorted({tuple(sorted(p)) for p in votes}):
        ab, ba = votes.get((a, b), 0), votes.get((b, a), 0)
        if ab == ba:
            continue
        win, lose, n_win, n_lose = (a, b, ab, ba) if ab > ba else (b, a, ba, ab)
        out.append((win, lose, n_win - n_lose, n_win / (n_win + n_lose)))
    return out


def borda(rankings: Sequence[Sequence[Sequence[int]]]) -> dict[int, float]:
    """Mean normalised Borda score in [0, 1] over the rankings that ranked each item.

    In a ranking of m ranked items, an item scores the number of items strictly
    below it plus half of those tied with it, divided by m − 1.
    """
    totals: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for tiers in rankings:
        m = sum(len(t) for t in tiers)
        if m < 2:
            continue
        below = m
        for tier in tiers:
            below -= len(tier)
            for item in tier:
                totals[item] += (below + 0.5 * (len(tier) - 1)) / (m - 1)
                counts[item] += 1
    return {item: totals[item] / counts[item] for item in totals}


def bradley_terry(rankings: Sequence[Sequence[Sequence[int]]], alpha: float = 0.01) -> dict[int, float]:
    """Bradley–Terry log-strengths from every strict pair of every ranking (choix, ILSR)."""
    import choix

    items = sorted({item for tiers in rankings for tier in tiers for item in tier})
    index = {item: i for i, item in enumerate(items)}
    data = [(index[a], index[b]) for tiers in rankings for a, b in strict_pairs(tiers)]
    if not data:
        return dict.fromkeys(items, 0.0)
    params = choix.ilsr_pairwise(len(items), data, alpha=alpha)
    return {item: float(params[index[item]]) for item in items}


# --- building comparisons in the database --------------------------------------------------


@dataclass
class BuildSummary:
    build_id: int
    rankings: int
    pairs: int
    strategy: str
    aggregate: str
    annotator_kind: str
    mode: str = "full"  # full | incremental
    changed: int = 0  # rankings whose pairs came in or went out
    excluded: dict[str, list[str]] | None = None  # pseudonym -> reasons

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _check(strategy: str, aggregate: str, annotator_kind: str) -> None:
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
    if aggregate not in AGGREGATES:
        raise InputError(f"unknown aggregate {aggregate!r} (expected one of {', '.join(AGGREGATES)})")
    if annotator_kind not in KINDS:
        raise InputError(f"unknown annotator kind {annotator_kind!r} (expected one of {', '.join(KINDS)})")
    if aggregate == "majority" and strategy != "all":
        raise InputError("majority aggregation votes on every pair; use it with --strategy all")


def build_pairs(
    session: Session,
    strategy: str = "all",
    aggregate: str = "none",
    annotator_kind: str = "any",
    excluded: Mapping[int, Sequence[str]] | None = None,
    full: bool = False,
) -> BuildSummary:
    """Bring the comparisons up to date with the rankings; the result equals a full rebuild's, row for row.

    Only the rankings that changed since the last build are expanded again; a
    first build, changed settings (strategy, aggregate, annotator kind, the set of
    excluded annotators) or `full` rebuild everything. Rankings of gold prompts
    never become pairs.

    Args:
        excluded: annotator id -> reasons: their rankings are left out, and the
            build records them by pseudonym.

    Raises:
        InputError: unknown settings, or an excluded annotator that does not exist.
    """
    _check(strategy, aggregate, annotator_kind)
    left_out = excluded_record(session, excluded)
    previous = session.scalar(select(PairBuild).order_by(PairBuild.id.desc()).limit(1))
    full = full or needs_full(previous, strategy, aggregate, annotator_kind, left_out)
    tail = mark_and_clear(session, aggregate != "none", annotator_kind, sorted(excluded or ()), full)
    if tail.mode == "full":  # the plan of the expansion below reads every ranking
        for table in (Ranking.__table__, RankingItem.__table__):
            refresh_statistics(session, table)
    build = PairBuild(
        strategy=strategy,
        aggregate=aggregate,
        annotator_kind=annotator_kind,
        excluded=left_out,
        mode=tail.mode,
        n_changed=tail.changed,
    )
    session.add(build)
    session.flush()
    if aggregate == "none" and tail.ranking_from is not None:
        _insert_expanded(session, build.id, strategy, tail.ranking_from)
    elif aggregate != "none" and tail.prompt_from is not None:
        _insert_aggregated(session, build.id, strategy, aggregate, tail.prompt_from)
    build.n_rankings = session.scalar(select(func.count()).where(Ranking.in_pairs))
    build.n_pairs = session.scalar(select(func.count()).select_from(Comparison))
    if tail.mode == "full" or tail.changed > build.n_rankings // 10:  # much of the table is new
        refresh_statistics(session, Comparison.__table__)
    return BuildSummary(
        build.id,
        build.n_rankings,
        build.n_pairs,
        strategy,
        aggregate,
        annotator_kind,
        tail.mode,
        tail.changed,
        left_out,
    )


def _ranked_items(strategy: str, ranking_from: int):
    """`ranking_items` as the expansion reads it, with each item's `place` among its ranking's used tiers.

    A tier number is the template's position of the tier (Tier 1 and Tier 3 of
    four stay 0 and 2, so their margin is 2), so strategies that name tiers by
    order (adjacent, best, worst) go by place, counted over the non-empty tiers
    only. `all` needs no place: the plain table keeps the hot path a plain join.
    """
    items = RankingItem.__table__
    if strategy == "all":
        return items.alias("a"), items.alias("b")
    place = func.dense_rank().over(partition_by=items.c.ranking_id, order_by=items.c.tier) - 1
    ranked = (
        select(items.c.ranking_id, items.c.candidate_id, items.c.tier, items.c.score, place.label("place"))
        .where(items.c.tier.is_not(None), items.c.ranking_id >= ranking_from)
        .subquery()
    )
    return ranked.alias("a"), ranked.alias("b")


def _insert_expanded(session: Session, build_id: int, strategy: str, ranking_from: int) -> None:
    """Write the pairs of the rankings the comparisons hold, from id `ranking_from` on."""
    ta, tb = _ranked_items(strategy, ranking_from)
    a, b = ta.c, tb.c
    condition = [b.tier > a.tier]
    if strategy == "adjacent":
        condition = [b.place == a.place + 1]
    elif strategy == "best-vs-rest":
        condition = [a.place == 0, b.place > 0]
    elif strategy == "best-vs-worst":  # n_tiers counts the tiers used: the worst one's place is n_tiers - 1
        condition = [a.place == 0, b.place == Ranking.n_tiers - 1, b.place > 0]
    # A score gap is rounded as the aggregated margins are: 0.6 - 0.2923 is stored as 0.3077, not
    # 0.30769999999999997 (Postgres rounds only NUMERIC, so through it on both databases).
    gap = cast(func.round(cast(a.score - b.score, Numeric), MARGIN_DIGITS), Float)
    margin = func.coalesce(gap, cast(b.tier - a.tier, Float))
    query = (
        select(
            literal(build_id),
            Ranking.prompt_id,
            a.candidate_id,
            b.candidate_id,
            Ranking.id,
            Annotator.kind,
            Ranking.criterion,
            margin,
            literal(1.0),
        )
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .join(ta, a.ranking_id == Ranking.id)
        .join(tb, and_(b.ranking_id == Ranking.id, *condition))
        .where(Ranking.in_pairs, Ranking.id >= ranking_from, a.tier.is_not(None), b.tier.is_not(None))
        .order_by(Ranking.id, a.tier, b.tier, a.candidate_id, b.candidate_id)
    )
    columns = [
        "build_id",
        "prompt_id",
        "chosen_id",
        "rejected_id",
        "ranking_id",
        "annotator_kind",
        "criterion",
        "margin",
        "weight",
    ]
    session.execute(insert(Comparison).from_select(columns, query))


def aggregate_prompt(
    rankings: list[list[list[int]]], strategy: str, aggregate: str
) -> list[tuple[int, int, float, float]]:
    """(chosen, rejected, margin, weight) for one prompt's rankings combined."""
    if aggregate == "majority":
        return [(a, b, float(m), w) for a, b, m, w in majority(rankings)]
    scores = borda(rankings) if aggregate == "borda" else bradley_terry(rankings)
    consensus = tiers_from_scores(scores, tolerance=1e-6)
    return [(a, b, scores[a] - scores[b], 1.0) for a, b, _ in expand_tiers(consensus, strategy)]


def _insert_aggregated(session: Session, build_id: int, strategy: str, aggregate: str, prompt_from: int) -> None:
    """Write the consensus pairs of the prompts from id `prompt_from` on, from the rankings the comparisons hold."""
    rows = []
    for prompt_id, all_views in iter_prompt_rankings(session, in_pairs_from=prompt_from):
        for criterion, views in by_criterion(all_views).items():
            kinds = {v.kind for v in views}
            kind = kinds.pop() if len(kinds) == 1 else "mixed"
            for chosen, rejected, margin, weight in aggregate_prompt([v.tiers for v in views], strategy, aggregate):
                rows.append(
                    {
                        "build_id": build_id,
                        "prompt_id": prompt_id,
                        "chosen_id": chosen,
                        "rejected_id": rejected,
                        "ranking_id": None,
                        "annotator_kind": kind,
                        "criterion": criterion,
                        "margin": round(margin, MARGIN_DIGITS) if math.isfinite(margin) else 0.0,
                        "weight": weight,
                    }
                )
        if len(rows) >= INSERT_BATCH:
            session.execute(insert(Comparison), rows)
            rows = []
    if rows:
        session.execute(insert(Comparison), rows)
