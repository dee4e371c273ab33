"""Which comparisons an export keeps, and what they hold.

An export chooses its pairs by annotator kind (`EXPORT_KINDS`) and by criterion: `kept_comparisons`
is that choice as a WHERE clause on the comparisons, `kept_prompts` the prompts it
keeps pairs of, and `pair_mix` counts what it keeps, leaves out, and what
contradicts, so the dataset version and its card can say so, and which criteria the pairs it keeps hold
(an export of several must choose one, or combine them: preflab asks rather than mixing two). Rankings that give
no pair at all are counted too, by why (`unpaired`): a whole tie (a verdict of no preference), or an
Arena battle of identical replies (a vote on the leaderboard, but no pair to train on).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import and_, case, func, or_, select, true
from sqlalchemy.orm import Session, aliased

from preflab.db.leaderboard.battles import identical_battles
from preflab.db.models import Annotator, Comparison, Ranking
from preflab.db.pairs.incremental import eligible
from preflab.errors import InputError

# `human-first`: people's pairs, and a judge's only on prompts (and criteria) no person gave a pair for, so
# a person and a judge never contradict each other in one dataset. `any` keeps every pair.
EXPORT_KINDS = ("human-first", "human", "ai", "any")


def of_criteria(column, criteria: Collection[str]):
    """`column` is one of `criteria` (true when there are none), as plain parameters: the export's readers in
    another process or over ADBC take a statement's parameters as they are, not an expanding IN list."""
    return or_(*(column == c for c in criteria)) if criteria else true()


def kept_comparisons(kind: str, criteria: Collection[str] = ()):
    """The WHERE clause on `Comparison` of an export's `kind` (one of EXPORT_KINDS), of `criteria` (empty: all)."""
    if kind not in EXPORT_KINDS:
        raise InputError(f"unknown annotator kind {kind!r} (expected one of {', '.join(EXPORT_KINDS)})")
    of = of_criteria(Comparison.criterion, criteria)
    if kind == "any":
        return of
    if kind in ("human", "ai"):
        return and_(of, Comparison.annotator_kind == kind)
    human = aliased(Comparison)
    by_people = select(human.id).where(
        human.prompt_id == Comparison.prompt_id,
        human.criterion == Comparison.criterion,  # a judge's helpfulness is not a person's harmlessness
        human.annotator_kind == "human",
    )
    return and_(of, or_(Comparison.annotator_kind != "ai", ~by_people.exists()))


def kept_prompts(kind: str, criteria: Collection[str] = ()):
    """A SELECT of the ids of the prompts an export of `kind` and `criteria` (empty: all) writes pairs of.

    Every prompt with a comparison keeps some under `any` and `human-first` (a
    judge's pairs go only where no person gave one), so those two need no
    per-pair test here.
    """
    query = select(Comparison.prompt_id).distinct()
    if kind in ("any", "human-first"):
        return query.where(of_criteria(Comparison.criterion, criteria))
    return query.where(kept_comparisons(kind, criteria))


def held_criteria(session: Session, kind: str = "any") -> list[str]:
    """The criteria of the pairs an export of `kind` keeps, in name order."""
    return sorted(session.scalars(select(Comparison.criterion).where(kept_comparisons(kind)).distinct()))


@dataclass
class PairMix:
    """What an export holds: pairs by annotator kind, those left out, and the contradicting ones."""

    kept: dict[str, int]  # annotator kind (human, ai, mixed) -> pairs exported
    left_out: dict[str, int]  # annotator kind -> pairs of the comparisons the export leaves out
    contradicting: dict[int, int]  # prompt id -> exported pairs whose opposite pair is exported too
    unpaired: dict[str, int] = field(default_factory=dict)  # why a ranking of these annotators gave no pair -> how many
    held: list[str] = field(default_factory=list)  # the criteria of the pairs exported, in name order

    @property
    def n_contradicting(self) -> int:
        return sum(self.contradicting.values())

    def as_dict(self) -> dict:
        return {
            "pairs_by_kind": self.kept,
            "left_out_by_kind": self.left_out,
            "contradicting_pairs": self.n_contradicting,
            "unpaired_rankings": self.unpaired,
        }


def pair_mix(session: Session, kind: str = "any", criterion: str | None = None) -> PairMix:
    """Count the comparisons an export of `kind` keeps, by annotator kind, and those that contradict.

    A pair contradicts when the same prompt also has the opposite pair (b over
    a): two annotators who disagree, or a person and a judge. One GROUP BY on
    the unordered pair, so it scales with the comparisons, not their square.
    With `criterion`, every count is of that criterion's comparisons (and rankings) alone.
    """
    criteria = (criterion,) if criterion else ()
    keep = kept_comparisons(kind, criteria)
    counted = session.execute(
        select(Comparison.annotator_kind, Comparison.criterion, func.count(), func.sum(case((keep, 1), else_=0)))
        .where(Comparison.criterion == criterion if criterion else true())
        .group_by(Comparison.annotator_kind, Comparison.criterion)
    ).all()  # one pass for both counts, and the criteria
    by_kind, kept = Counter(), Counter()
    for k, _, n, n_kept in counted:
        by_kind[k] += int(n)
        kept[k] += int(n_kept or 0)
    kept = {k: n for k, n in kept.items() if n}
    held = sorted({c for _, c, _, n_kept in counted if n_kept})
    low = case((Comparison.chosen_id < Comparison.rejected_id, Comparison.chosen_id), else_=Comparison.rejected_id)
    high = case((Comparison.chosen_id < Comparison.rejected_id, Comparison.rejected_id), else_=Comparison.chosen_id)
    groups = (
        select(Comparison.prompt_id, func.count().label("n"))
        .where(keep)
        .group_by(Comparison.prompt_id, low, high)
        .having(func.min(Comparison.chosen_id) != func.max(Comparison.chosen_id))
        .subquery()
    )
    contradicting = dict(
        session.execute(select(groups.c.prompt_id, func.sum(groups.c.n)).group_by(groups.c.prompt_id)).all()
    )
    left_out = {k: n - kept.get(k, 0) for k, n in by_kind.items() if n - kept.get(k, 0)}
    contradicting = {int(p): int(n) for p, n in contradicting.items()}
    return PairMix(kept, left_out, contradicting, unpaired(session, kind, criteria), held)


IDENTICAL_REPLIES = "battles of identical replies (two models gave the same reply: a vote on the leaderboard, no pair)"
WHOLE_TIES = "whole ties (every reply ranked alike: a verdict of no preference, no pair)"
# each reason in a word, for a summary line: (one, many)
UNPAIRED_NAMES = {
    IDENTICAL_REPLIES: ("battle of identical replies", "battles of identical replies"),
    WHOLE_TIES: ("whole tie", "whole ties"),
}


def unpaired(session: Session, kind: str = "any", criteria: Collection[str] = ()) -> dict[str, int]:
    """The rankings `pairs build` takes, of an export's annotators (and `criteria`: empty, all), that give no pair
    by their kind: why -> how many.

    A ranking of one tier gives none: a whole tie of two or more replies (a verdict that none is better), or an
    Arena battle of identical replies (one reply; counted on the leaderboard). A new user counted both, and
    the export must give the same count.
    """

    def counted(*where) -> int:
        query = select(func.count()).select_from(Ranking).where(eligible("any", ()), Ranking.n_tiers == 1, *where)
        if kind in ("human", "ai"):
            query = query.where(Ranking.annotator_id.in_(select(Annotator.id).where(Annotator.kind == kind)))
        if criteria:
            query = query.where(of_criteria(Ranking.criterion, criteria))
        return int(session.scalar(query))

    identical = counted(identical_battles())
    found = {IDENTICAL_REPLIES: identical, WHOLE_TIES: counted() - identical}
    return {why: int(n) for why, n in found.items() if n}
