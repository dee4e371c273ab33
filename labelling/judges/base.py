"""What every judge shares: its identity as an AI annotator, and writing its rankings.

A judge run is identified by its kind, model and full configuration: the same
configuration is the same annotator and the same run id, so re-running it keeps
every ranking it already wrote. A ranking's external id names the run, the prompt
and the exact set of candidates ranked; when a prompt gains candidates, the new
ranking supersedes the judge's older one for that prompt.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import Ranking, RankingItem, RankingStatus
from preflab.db.pairs.build import tiers_from_scores
from preflab.db.store import chunks, ensure_annotators
from preflab.labelling.selection import PromptCandidates, prompts_with_candidates

# (candidate scores, per-candidate details) for one prompt; a None score = not ranked.
Judgement = tuple[dict[int, float | None], dict[int, dict[str, Any]]]


@dataclass
class JudgeRun:
    kind: str
    model: str
    config: dict[str, Any]

    @property
    def run_id(self) -> str:
        blob = json.dumps({"kind": self.kind, "model": self.model, "config": self.config}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def annotator_name(self) -> str:
        return f"judge:{self.kind}:{self.run_id}:{self.model[-200:]}"


@dataclass
class JudgeSummary:
    judge: str
    run_id: str
    annotator_id: int
    prompts: int = 0  # prompts with enough candidates
    ranked: int = 0  # new rankings written
    kept: int = 0  # rankings this run had already written
    superseded: int = 0  # older rankings of this judge replaced (the prompt gained candidates)
    unscored: int = 0  # candidates the judge could not score (left unranked)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "extra"}
        out.update(self.extra)
        return out


@dataclass
class JudgeResult:
    """What a judge run did and how far the judge can be trusted."""

    model: str  # the judge model's label
    summary: JudgeSummary
    measures: dict[str, Any]  # this judge's row of `judge_report`

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary.as_dict(), "report": self.measures}


def external_id(run_id: str, prompt_id: int, candidate_ids: Sequence[int]) -> str:
    ids = ",".join(map(str, sorted(candidate_ids)))
    return f"{run_id}:{prompt_id}:{hashlib.sha256(ids.encode()).hexdigest()[:16]}"


def ensure_judge(session: Session, run: JudgeRun) -> int:
    """The AI annotator for this judge configuration (created on first use)."""
    key = ("ai", run.annotator_name)
    # The name holds the run id, so an existing annotator already has this configuration.
    return ensure_annotators(
        session,
        {key: {"judge_kind": run.kind, "model": run.model[:300], "config": {"run_id": run.run_id, **run.config}}},
    )[key]


def write_ranking(
    session: Session, annotator_id: int, run: JudgeRun, item: PromptCandidates, judgement: Judgement
) -> tuple[int, int]:
    """Store one prompt's judge ranking (tiers by score, best first); returns (ranking id, superseded)."""
    scores, details = judgement
    tiers = tiers_from_scores({c: s for c, s in scores.items() if s is not None})
    tier_of = {c: t for t, tier in enumerate(tiers) for c in tier}
    old = session.execute(
        update(Ranking)
        .where(
            Ranking.annotator_id == annotator_id,
            Ranking.prompt_id == item.prompt_id,
            Ranking.status == RankingStatus.valid.value,
        )
        .values(status=RankingStatus.superseded.value)
    ).rowcount
    ranking_id = session.execute(
        insert(Ranking)
        .values(
            prompt_id=item.prompt_id,
            annotator_id=annotator_id,
            source="judge",
            external_id=external_id(run.run_id, item.prompt_id, item.candidate_ids),
            version=1,
            status=RankingStatus.valid.value,
            n_tiers=len(tiers),
            same_as_shown=False,
            judge_run=run.run_id,
        )
        .returning(Ranking.id)
    ).scalar_one()
    session.execute(
        insert(RankingItem),
        [
            {
                "ranking_id": ranking_id,
                "candidate_id": cid,
                "tier": tier_of.get(cid),
                "shown_position": position,
                "score": scores.get(cid),
                "details": details.get(cid),
            }
            for position, cid in enumerate(item.candidate_ids)
        ],
    )
    return ranking_id, old


def timed(judgement: Judgement, seconds: float) -> Judgement:
    """The judgement with each candidate's share of the judging time in its details (for the report).

    A judgement that measured its own (a panel's: its members' time) keeps it.
    """
    scores, details = judgement
    return scores, {c: {"seconds": round(seconds, 4), **(details.get(c) or {})} for c in {*scores, *details}}


def record_stats(session: Session, annotator_id: int, stats: dict[str, Any], replace: bool = False) -> dict[str, Any]:
    """Add a run's engine stats (`EngineStats.as_dict`) to those stored on its annotator; returns the sums
    (`replace`: store `stats` as the sums, a panel's being its members' own).

    They live in the annotator's configuration under "engine" (what every run of this judge asked and cost,
    all runs together), read by `judge report`, `stats --judges` and the report. The row is locked while
    it is updated, so shards finishing at once add up (Postgres; SQLite has one writer at a time).
    """
    from preflab.db.models import Annotator

    row = session.scalars(select(Annotator).where(Annotator.id == annotator_id).with_for_update()).one()
    config = dict(row.config or {})
    total = {} if replace else dict(config.get("engine") or {})
    for name in ENGINE_SUMS:
        total[name] = round((total.get(name) or 0) + (stats.get(name) or 0), 6)
    total["runs"] = int(stats.get("runs") or 0) if replace else int(total.get("runs") or 0) + 1
    total.update({name: stats[name] for name in ("engine", "model", "price_in", "price_out") if name in stats})
    config["engine"] = total
    row.config = config
    return total


# The engine stats that add up over runs.
ENGINE_SUMS = (
    "requests",
    "cache_hits",
    "tokens_in",
    "tokens_out",
    "retries",
    "errors",
    "quarantined",
    "seconds",
    "cost",
)


def judge_prompts(
    sessions: sessionmaker[Session],
    run: JudgeRun,
    judge: Callable[[list[PromptCandidates]], list[Judgement | None]],
    prompt_ids: list[int] | None = None,
    candidate_model: str | None = None,
    require_reference: bool = False,
    prompts_per_batch: int = 8,
    reporter: Reporter = SILENT,
    stats: Callable[[], dict[str, Any]] | None = None,
) -> JudgeSummary:
    """Judge every prompt with two or more candidates that this run has not ranked yet.

    `judge` turns a batch of prompts into one judgement per prompt; each batch's
    rankings are written in their own transaction, so a crash keeps them. Each
    candidate's details record its share of its batch's judging time. A judgement of
    None (a server gave no answer after every retry) leaves its prompt unranked, for the
    next run to ask again (`unanswered`).

    Args:
        stats: the run's engine stats so far (`EngineStats.as_dict`), read when the run ends:
            added to those stored on the judge's annotator, and given as the summary's "engine".
    """
    start = time.perf_counter()
    with sessions.begin() as session:
        annotator_id = ensure_judge(session, run)
        items = prompts_with_candidates(session, prompt_ids, candidate_model, require_reference=require_reference)
        done = set()
        ids = [external_id(run.run_id, i.prompt_id, i.candidate_ids) for i in items]
        for part in chunks(ids):
            done.update(
                session.scalars(
                    select(Ranking.external_id).where(
                        Ranking.annotator_id == annotator_id, Ranking.source == "judge", Ranking.external_id.in_(part)
                    )
                )
            )
    summary = JudgeSummary(run.kind, run.run_id, annotator_id, prompts=len(items))
    todo = [i for i, eid in zip(items, ids) if eid not in done]
    summary.kept = len(items) - len(todo)
    with reporter.progress(f"judging ({run.kind})", len(todo)) as advance:
        for batch in chunks(todo, prompts_per_batch):
            began = time.perf_counter()
            judgements = judge(list(batch))
            per_candidate = (time.perf_counter() - began) / max(1, sum(len(i.candidate_ids) for i in batch))
            judgements = [None if judgement is None else timed(judgement, per_candidate) for judgement in judgements]
            with sessions.begin() as session:
                for item, judgement in zip(batch, judgements):
                    if judgement is None:
                        summary.extra["unanswered"] = summary.extra.get("unanswered", 0) + 1
                        continue
                    _, old = write_ranking(session, annotator_id, run, item, judgement)
                    summary.ranked += 1
                    summary.superseded += old
                    summary.unscored += sum(1 for c in item.candidate_ids if judgement[0].get(c) is None)
            advance(len(batch))
    summary.seconds = time.perf_counter() - start
    if stats is not None:
        summary.extra["engine"] = stats()
        with sessions.begin() as session:
            summary.extra["engine_total"] = record_stats(session, annotator_id, summary.extra["engine"])
    return summary
