"""Which rankings a pair build rewrites: all of them, or only those that changed.

Each ranking records whether the comparisons hold its pairs (`rankings.in_pairs`).
A build takes the valid rankings of the chosen annotator kind, leaving out the
excluded annotators and every prompt with a gold answer; a ranking whose mark
differs from that (new, superseded, deleted, its prompt made gold) has changed.
The marks are set before the pairs are written, and the pairs are written from
the marks, so a ranking that commits while a build runs is simply picked up by
the next one.

The comparisons are kept in the order a full build writes them (rankings by id;
aggregated pairs by prompt id), because an export writes pairs in that order and
hashes them. So an incremental build rewrites the tail from the first ranking
(or, aggregated, the first prompt) that came in; a ranking that went out only
loses its pairs. New rankings come last, so the tail is usually just them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import and_, delete, not_, select, update
from sqlalchemy.orm import Session

from preflab.db.bulk import for_values, in_values
from preflab.db.models import Annotator, Comparison, GoldAnswer, PairBuild, Ranking, RankingStatus
from preflab.errors import InputError

rankings, comparisons = Ranking.__table__, Comparison.__table__


def excluded_record(session: Session, excluded: Mapping[int, Sequence[str]] | None) -> dict[str, list[str]] | None:
    """What a build records of the annotators it leaves out: {pseudonym: [reasons]} (None when none are).

    Raises:
        InputError: an annotator id that does not exist.
    """
    if not excluded:
        return None
    pseudonyms = dict(
        session.execute(select(Annotator.id, Annotator.pseudonym).where(Annotator.id.in_(list(excluded)))).all()
    )
    unknown = sorted(set(excluded) - set(pseudonyms))
    if unknown:
        raise InputError(f"cannot leave out annotator {', '.join(map(str, unknown))}: there is no such annotator")
    return {
        pseudonyms[aid]: list(reasons) for aid, reasons in sorted(excluded.items(), key=lambda kv: pseudonyms[kv[0]])
    }


def eligible(annotator_kind: str, excluded_ids: Sequence[int]):
    """SQL: the ranking is one the build takes (valid, of the kind, not excluded, not of a gold prompt)."""
    clauses = [
        rankings.c.status == RankingStatus.valid.value,
        rankings.c.prompt_id.not_in(select(GoldAnswer.prompt_id)),
    ]
    if annotator_kind != "any":
        clauses.append(rankings.c.annotator_id.in_(select(Annotator.id).where(Annotator.kind == annotator_kind)))
    if excluded_ids:
        clauses.append(rankings.c.annotator_id.not_in(list(excluded_ids)))
    return and_(*clauses)


def needs_full(
    previous: PairBuild | None,
    strategy: str,
    aggregate: str,
    annotator_kind: str,
    excluded: dict[str, list[str]] | None,
) -> bool:
    """A full rebuild is due when no build tracked its rankings, or the settings changed."""
    return (
        previous is None
        or previous.mode is None
        or (previous.strategy, previous.aggregate, previous.annotator_kind) != (strategy, aggregate, annotator_kind)
        or set(previous.excluded or {}) != set(excluded or {})
    )


@dataclass
class Tail:
    """What a build must write: the pairs of rankings from `ranking_from` or of prompts from `prompt_from`."""

    mode: str  # full | incremental
    changed: int  # rankings that came in or went out
    ranking_from: int | None = None  # write the marked rankings with id >= this (None: none)
    prompt_from: int | None = None  # aggregated: re-aggregate prompts with id >= this (None: none)


def mark_and_clear(
    session: Session, aggregated: bool, annotator_kind: str, excluded_ids: Sequence[int], full: bool
) -> Tail:
    """Set every changed ranking's mark and delete the comparisons that must be written again."""
    rule = eligible(annotator_kind, excluded_ids)
    if full:
        came = session.execute(update(rankings).where(rule, not_(rankings.c.in_pairs)).values(in_pairs=True)).rowcount
        went = session.execute(update(rankings).where(not_(rule), rankings.c.in_pairs).values(in_pairs=False)).rowcount
        session.execute(delete(comparisons))
        return Tail("full", came + went, ranking_from=0, prompt_from=0)
    came = session.execute(select(rankings.c.id, rankings.c.prompt_id).where(rule, not_(rankings.c.in_pairs))).all()
    went = session.execute(select(rankings.c.id, rankings.c.prompt_id).where(not_(rule), rankings.c.in_pairs)).all()
    tail = Tail("incremental", len(came) + len(went))
    if not came and not went:
        return tail
    for rows, value in ((came, True), (went, False)):
        for_values(
            session,
            update(rankings).where(in_values(session, rankings.c.id)).values(in_pairs=value),
            [rid for rid, _ in rows],
        )
    if aggregated:
        tail.prompt_from = min(pid for _, pid in came + went)
        session.execute(delete(comparisons).where(comparisons.c.prompt_id >= tail.prompt_from))
        return tail
    for_values(
        session, delete(comparisons).where(in_values(session, comparisons.c.ranking_id)), [rid for rid, _ in went]
    )
    if came:
        tail.ranking_from = min(rid for rid, _ in came)
        session.execute(delete(comparisons).where(comparisons.c.ranking_id >= tail.ranking_from))
    return tail
