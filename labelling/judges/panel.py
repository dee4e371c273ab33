"""A panel of judges ("Replacing Judges with Juries", Verga et al., 2024): one ranking from several judges' own.

Each member ranks first, as a judge of its own (its own annotator, its answers stored and reused);
the panel then ranks each prompt from its members' stored rankings of the same candidates:

- pairwise: each pair's outcome is the majority of the members' outcomes. A member that abstained
  (its verdict could not be read) does not vote; a win needs more than half of the votes, a loss
  too; anything else is a tie; no vote at all is the panel's abstention. P(first better) in each
  order is the share of voting members whose verdict in that order went to the reply shown first,
  so `judge report`'s position measures read the panel as they read one judge.
- score, reference, likelihood: the mean of the members' scores (those that scored the candidate).

A prompt that a member left unranked (its server gave no answer) is left unranked by the panel too,
for the next run. A member that could read too little to rank a prompt abstained there (`base.write_ranking`):
it votes with what it read, and a panel that reads fewer than two candidates abstains too. Each candidate's
judging time is its members' together.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.models import Ranking, RankingItem, RankingStatus
from preflab.labelling.judges.base import Judgement, JudgeRun, JudgeSummary, external_id
from preflab.labelling.judges.pairwise import rank_outcomes
from preflab.labelling.selection import PromptCandidates


def panel_label(labels: list[str]) -> str:
    """What the panel's annotator names as its model: its members, in the order given."""
    return "panel:" + "+".join(labels)


def majority(outcomes: list[str]) -> str:
    """The panel's outcome from its members' ("win", "loss", "tie" or "abstain"), for the first candidate."""
    votes = Counter(o for o in outcomes if o != "abstain")
    voting = sum(votes.values())
    if not voting:
        return "abstain"
    if votes["win"] * 2 > voting:
        return "win"
    if votes["loss"] * 2 > voting:
        return "loss"
    return "tie"


def _share(values: list[float | None]) -> float | None:
    """The share of members whose P(first better) in one order went past 0.5 (a tie at 0.5 half a vote)."""
    known = [v for v in values if v is not None]
    return None if not known else sum(1.0 if v > 0.5 else 0.5 if v == 0.5 else 0.0 for v in known) / len(known)


def _stored(
    session: Session, runs: list[JudgeRun], summaries: list[JudgeSummary], items: list[PromptCandidates]
) -> dict[tuple[int, int], dict[int, tuple[float | None, dict]]]:
    """(member, prompt) -> candidate -> (score, details), from each member's ranking of the same candidates: its
    valid ranking, or its abstention (`skipped`: it read too little to rank, and votes with what it read)."""
    ids = {
        external_id(run.run_id, item.prompt_id, item.candidate_ids): item.prompt_id for run in runs for item in items
    }
    # A judge named twice sits twice (two votes): its ranking is read once.
    members_of: dict[int, list[int]] = {}
    for m, summary in enumerate(summaries):
        members_of.setdefault(summary.annotator_id, []).append(m)
    rankings = session.execute(
        select(Ranking.id, Ranking.annotator_id, Ranking.external_id).where(
            Ranking.annotator_id.in_(list(members_of)),
            Ranking.status.in_([RankingStatus.valid.value, RankingStatus.skipped.value]),
            Ranking.source == "judge",
            Ranking.external_id.in_(list(ids)),
        )
    )
    owner = {rid: (aid, ids[eid]) for rid, aid, eid in rankings if eid in ids}
    found: dict[tuple[int, int], dict[int, tuple[float | None, dict]]] = {key: {} for key in owner.values()}
    if owner:
        for rid, cid, value, details in session.execute(
            select(RankingItem.ranking_id, RankingItem.candidate_id, RankingItem.score, RankingItem.details).where(
                RankingItem.ranking_id.in_(list(owner))
            )
        ):
            found[owner[rid]][cid] = (value, details or {})
    return {(m, prompt_id): ranked for (aid, prompt_id), ranked in found.items() for m in members_of[aid]}


def panel_judge(
    sessions: sessionmaker[Session], kind: str, config, runs: list[JudgeRun], summaries: list[JudgeSummary]
):
    """The panel's judge function: each prompt ranked from its members' stored rankings (None: one has none)."""

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        with sessions.begin() as session:
            stored = _stored(session, runs, summaries, items)
        out: list[Judgement | None] = []
        for item in items:
            members = [stored.get((m, item.prompt_id)) for m in range(len(runs))]
            if any(member is None for member in members):
                out.append(None)
                continue
            seconds = {
                c: round(sum(float(m[c][1].get("seconds") or 0.0) for m in members), 4) for c in item.candidate_ids
            }
            scores, details = _pairwise(item, members, config.aggregate) if kind == "pairwise" else _mean(item, members)
            out.append((scores, {c: {**details[c], "seconds": seconds[c]} for c in item.candidate_ids}))
        return out

    return judge


def _verdict(member: dict[int, tuple[float | None, dict]], x: int, y: int) -> dict[str, Any]:
    """Member's entry for x against y (x's view); an abstention where it has none."""
    for entry in member.get(x, (None, {}))[1].get("pairs", []):
        if entry.get("vs") == y:
            return entry
    return {"outcome": "abstain", "p_as_a": None, "p_as_b": None}


def _pairwise(item: PromptCandidates, members: list[dict], aggregate: str) -> Judgement:
    verdicts = {}
    for x, y in combinations(item.candidate_ids, 2):
        said = [_verdict(member, x, y) for member in members]
        result = majority([entry["outcome"] for entry in said])
        voting = [entry for entry in said if entry["outcome"] != "abstain"]
        p_a = _share([entry.get("p_as_a") for entry in voting])
        p_b = _share([entry.get("p_as_b") for entry in voting])
        verdicts[(x, y)] = (result, p_a, p_b, {"voters": len(voting)})
    return rank_outcomes(item.candidate_ids, verdicts, aggregate)


def _mean(item: PromptCandidates, members: list[dict]) -> Judgement:
    scores, details = {}, {}
    for cid in item.candidate_ids:
        given = [member[cid][0] if cid in member else None for member in members]
        known = [value for value in given if value is not None]
        scores[cid] = round(sum(known) / len(known), 6) if known else None
        details[cid] = {"members": given, **({} if known else {"abstain": True})}
    return scores, details
