"""The Data section: what is in the store, where it came from, and what was quarantined.

Every number is a `GROUP BY` in the database; no row is loaded to be counted.
"""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from preflab.db.ingest.datasets.arena import IDENTICAL
from preflab.db.leaderboard.battles import identical_battles
from preflab.db.models import (
    Annotator,
    Candidate,
    ModelVersion,
    Prompt,
    Ranking,
    RankingItem,
    RankingStatus,
    RawRecord,
    RawStatus,
)
from preflab.db.quality.agreement import counts
from preflab.report.privacy import excerpt, model_label

TOP = 10  # rows of a "by source" table before the rest are summed as "other"


def _monday(day) -> str:
    """The Monday (YYYY-MM-DD) of the week of a day (a date, or SQLite's 'YYYY-MM-DD')."""
    day = day if isinstance(day, date) else date.fromisoformat(str(day)[:10])
    return (day - timedelta(days=day.weekday())).isoformat()


def _by_week(rows) -> dict[str, int]:
    """(day, count) rows summed by week."""
    out: dict[str, int] = {}
    for day, n in rows:
        if day is not None:
            out[_monday(day)] = out.get(_monday(day), 0) + n
    return out


def _top(rows: list[tuple[Any, int]], label=lambda key: key or "(none)") -> list[dict[str, Any]]:
    """(key, count) rows as labelled dicts, largest first; past TOP rows, the rest as one "other" row."""
    merged: dict[str, int] = {}
    for key, n in rows:  # two keys may share a label (two folders holding `model`)
        merged[label(key)] = merged.get(label(key), 0) + n
    rows = sorted(merged.items(), key=lambda r: (-r[1], r[0]))
    out = [{"name": name, "count": n} for name, n in rows[:TOP]]
    rest = sum(n for _, n in rows[TOP:])
    if rest:
        out.append({"name": f"other ({len(rows) - TOP})", "count": rest})
    return out


def rankings_by_source(session: Session) -> list[dict[str, Any]]:
    """Per source: rankings by status, and valid ones identical to the order shown, by annotator kind."""
    rows = session.execute(
        select(
            Ranking.source,
            Ranking.status,
            Annotator.kind,
            func.count(),
            func.sum(case((Ranking.same_as_shown.is_(True), 1), else_=0)),
        )
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .group_by(Ranking.source, Ranking.status, Annotator.kind)
    ).all()
    out: dict[str, dict[str, Any]] = {}
    for source, status, kind, n, same in rows:
        entry = out.setdefault(
            source,
            {"source": source, "total": 0, "valid": 0, "human": 0, "ai": 0, "other_status": 0, "same_as_shown": 0},
        )
        entry["total"] += n
        if status == RankingStatus.valid.value:
            entry["valid"] += n
            entry[kind if kind in ("human", "ai") else "ai"] += n
            entry["same_as_shown"] += int(same or 0)
        else:
            entry["other_status"] += n
    for entry in out.values():
        entry["same_as_shown_rate"] = entry["same_as_shown"] / entry["valid"] if entry["valid"] else None
    return sorted(out.values(), key=lambda e: -e["total"])


def weekly(session: Session) -> dict[str, Any]:
    """Prompts, candidates and rankings (by source) added per week (Monday first).

    The database counts by day (`date()` in SQLite and Postgres alike, and cheaper
    than a week expression per row); the few days are folded into weeks here.
    """

    def per_day(column, *by):
        day = func.date(column)
        return session.execute(select(day, *by, func.count()).group_by(day, *by)).all()

    prompts = _by_week(per_day(Prompt.created_at))
    candidates = _by_week(per_day(Candidate.created_at))
    by_source: dict[str, list] = {}
    for day, source, n in per_day(Ranking.created_at, Ranking.source):
        by_source.setdefault(source, []).append((day, n))
    rankings = {source: _by_week(rows) for source, rows in sorted(by_source.items())}
    weeks = sorted({*prompts, *candidates, *(w for by_week in rankings.values() for w in by_week)})
    return {
        "weeks": weeks,
        "prompts": [prompts.get(w, 0) for w in weeks],
        "candidates": [candidates.get(w, 0) for w in weeks],
        "rankings": {source: [by_week.get(w, 0) for w in weeks] for source, by_week in rankings.items()},
    }


def quarantine(session: Session) -> dict[str, Any] | None:
    """Quarantined records by source and by reason (reasons cut to an excerpt)."""
    quarantined = RawRecord.status == RawStatus.quarantined.value
    by_source = session.execute(
        select(RawRecord.source, func.count()).where(quarantined).group_by(RawRecord.source)
    ).all()
    if not by_source:
        return None
    reason = func.substr(RawRecord.reason, 1, 200)
    by_reason: dict[str, int] = {}
    for text, n in session.execute(select(reason, func.count()).where(quarantined).group_by(reason)):
        key = excerpt(text, 120) or "(no reason)"
        by_reason[key] = by_reason.get(key, 0) + n
    return {
        "total": sum(n for _, n in by_source),
        "by_source": _top(by_source),
        "by_reason": _top(list(by_reason.items())),
    }


def _with_identical_battles(session: Session, author, by_model: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """`by_model` with the authors only an Arena battle of identical replies names (its details: both models).

    Such a battle is a ranking of its one reply, whose item names one model; a new user found the reply "Hello!",
    written by all five Arena models, counted for one. Every model that wrote it counts it once.
    """
    same = session.execute(
        select(RankingItem.candidate_id, Ranking.details)
        .join(Ranking, Ranking.id == RankingItem.ranking_id)
        .where(identical_battles())
    ).all()
    if not same:
        return by_model
    ids = sorted({candidate for candidate, _ in same})
    credited = set(
        session.execute(
            select(author, Candidate.id)
            .select_from(Candidate)
            .outerjoin(RankingItem, RankingItem.candidate_id == Candidate.id)
            .outerjoin(ModelVersion, ModelVersion.id == Candidate.model_version_id)
            .where(Candidate.id.in_(ids))
        ).all()
    )
    wrote = {(m, c) for c, details in same for m in (details or {}).get(IDENTICAL) or () if isinstance(m, str)}
    counted = Counter(dict(by_model))
    counted.update(model for model, _ in wrote - credited)
    return list(counted.items())


def data_section(session: Session) -> dict[str, Any]:
    """Counts, sources, weekly arrivals and quarantine (zeros and empty lists for an empty store)."""
    totals = counts(session)
    prompts_by_source = session.execute(select(Prompt.source, func.count()).group_by(Prompt.source)).all()
    # Who wrote a reply is its ranking's to say (one text can be two models' replies): a reply counts once for each,
    # named as the leaderboard names it (`db/leaderboard/battles.py`): the ranking item's model, else the
    # candidate's model version, else the candidate's first writer.
    author = func.coalesce(RankingItem.model, ModelVersion.name, Candidate.model)
    candidates_by_model = session.execute(
        select(author, func.count(func.distinct(Candidate.id)))
        .select_from(Candidate)
        .outerjoin(RankingItem, RankingItem.candidate_id == Candidate.id)
        .outerjoin(ModelVersion, ModelVersion.id == Candidate.model_version_id)
        .group_by(author)
    ).all()
    candidates_by_model = _with_identical_battles(session, author, candidates_by_model)
    return {
        "counts": totals,
        "rankings_by_source": rankings_by_source(session),
        "prompts_by_source": _top(prompts_by_source, lambda s: excerpt(model_label(s), 60) if s else "(no source)"),
        "candidates_by_model": _top(candidates_by_model, lambda m: model_label(m) if m else "(no model)"),
        "weekly": weekly(session),
        "quarantine": quarantine(session),
    }
