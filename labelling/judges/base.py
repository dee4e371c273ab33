"""What every judge shares: its identity as an AI annotator, and writing its rankings.

A judge run is identified by its kind, model and full configuration: the same
configuration is the same annotator and the same run id, so re-running it keeps
every ranking it already wrote. A ranking's external id names the run, the prompt
and the exact set of candidates ranked; when a prompt gains candidates, the new
ranking supersedes the judge's older one for that prompt.

A judgement that scores fewer than two candidates (replies that could not be read: no
score, no verdict) ranks nothing: it is stored as the judge's abstention (status
`skipped`: recorded with what it read, never a pair), not as a valid ranking with no
tiers, and counted as `abstained`, not `ranked`. A run stops with one sentence
(`JudgeError`) once more of its candidates could not be read than its `ReadBudget`
allows, keeping what it wrote, before it spends the rest of its requests.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.ai_rankings import write_ai_ranking
from preflab.db.models import OVERALL, Ranking
from preflab.db.pairs.build import tiers_from_scores
from preflab.db.requests import added_stats
from preflab.db.store import chunks, ensure_annotators, ensure_criteria
from preflab.errors import ConfigError, JudgeError
from preflab.labelling.selection import PromptCandidates, prompts_with_candidates
from preflab.lm.engines import Failed

# (candidate scores, per-candidate details) for one prompt; a None score = not ranked.
Judgement = tuple[dict[int, float | None], dict[int, dict[str, Any]]]


@dataclass
class JudgeRun:
    kind: str
    model: str
    config: dict[str, Any]
    # What it judges by (`criteria.CriterionConfig`): its rankings carry the criterion, whose rubric is stored.
    criterion: str = OVERALL
    rubric: str | None = None

    @classmethod
    def of(cls, kind: str, model: str, config, identity: dict[str, Any]) -> JudgeRun:
        """The run of a judge `config` (its `identity` computed by the caller), with the criterion it judges by."""
        criterion = getattr(config, "criterion", OVERALL)
        rubric = config.rubric() if criterion != OVERALL and hasattr(config, "rubric") else None
        return cls(kind, model, identity, criterion, rubric)

    @property
    def run_id(self) -> str:
        blob = json.dumps({"kind": self.kind, "model": self.model, "config": self.config}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def annotator_name(self) -> str:
        return f"judge:{self.kind}:{self.run_id}:{self.model[-200:]}"


# A run is stopped by its read budget only once it has judged this many candidates: a few unreadable
# replies at the start say little.
BUDGET_FROM = 16


@dataclass
class ReadBudget:
    """How many replies a judge run may fail to read before it stops (`preflab judge KIND --max-unreadable`)."""

    max_unreadable: float = field(
        default=0.5,
        metadata={
            "help": "Stop once more than this share of the candidates this run judged could not be read (no score, "
            f"no verdict), checked after each batch from {BUDGET_FROM} candidates on; what was read is kept. "
            "1: never stop."
        },
    )

    def __post_init__(self) -> None:
        if not 0 <= self.max_unreadable <= 1:
            raise ConfigError(f"--max-unreadable is a share between 0 and 1, got {self.max_unreadable}")

    def exceeded(self, read: int, unread: int) -> bool:
        judged = read + unread
        return judged >= BUDGET_FROM and unread > self.max_unreadable * judged


@dataclass
class JudgeSummary:
    judge: str
    run_id: str
    annotator_id: int
    prompts: int = 0  # prompts with enough candidates
    ranked: int = 0  # new rankings written that rank two candidates or more
    kept: int = 0  # rankings (and abstentions) this run had already written
    superseded: int = 0  # older rankings of this judge replaced (the prompt gained candidates)
    unscored: int = 0  # candidates the judge could not score (left unranked)
    abstained: int = 0  # prompts where it could read fewer than two candidates: stored as abstentions, no ranking
    seconds: float = 0.0
    criterion: str = OVERALL  # what it judged by (its rankings', and its measures')
    extra: dict[str, Any] = field(default_factory=dict)
    written: list[int] = field(default_factory=list)  # the valid rankings this run wrote (its own measures)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("extra", "written")}
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


def read_scores(judgement: Judgement) -> dict[int, float]:
    """The candidates a judgement scored, with their scores (None and NaN: not read)."""
    return {c: s for c, s in judgement[0].items() if s is not None and not math.isnan(s)}


def unanswered(answer) -> bool:
    """No answer after every retry: the prompt is left for the next run (an item refused for itself is an answer)."""
    return isinstance(answer, Failed) and not answer.quarantined


def read_choices(answer, choices: tuple[str, ...]) -> tuple[dict[str, float] | None, str | None]:
    """(log p of each choice, None) from an engine's answer, or (None, why it cannot be read): the item was
    refused, or the reply names no choice (an abstention, never a guess)."""
    if isinstance(answer, Failed):
        return None, answer.reason
    read = answer.choice_logprobs(choices)
    if read is None or all(v == float("-inf") for v in read.values()):
        return None, f"no {' or '.join(choices[:6])} in the reply: {answer.text[:200]!r}"
    return read, None


def ranks(judgement: Judgement) -> bool:
    """Whether a judgement ranks anything: two candidates or more with a score."""
    return len(read_scores(judgement)) >= 2


def write_ranking(
    session: Session, annotator_id: int, run: JudgeRun, item: PromptCandidates, judgement: Judgement
) -> tuple[int, int]:
    """Store one prompt's judge ranking (tiers by score, best first); returns (ranking id, superseded).

    A judgement that ranks nothing (`ranks`) is stored as the judge's abstention (status `skipped`, no
    tiers, what it read in the items' details): no pairs, and it supersedes none of the judge's rankings.
    """
    scores = read_scores(judgement)
    details = judgement[1]
    if run.criterion != OVERALL:
        ensure_criteria(session, [run.criterion], {run.criterion: run.rubric} if run.rubric else None)
    return write_ai_ranking(
        session,
        criterion=run.criterion,
        annotator_id=annotator_id,
        prompt_id=item.prompt_id,
        source="judge",
        external_id=external_id(run.run_id, item.prompt_id, item.candidate_ids),
        run_id=run.run_id,
        tiers=tiers_from_scores(scores) if len(scores) >= 2 else [],
        items=[
            {"candidate_id": cid, "shown_position": position, "score": scores.get(cid), "details": details.get(cid)}
            for position, cid in enumerate(item.candidate_ids)
        ],
    )


def run_measures(sessions: sessionmaker[Session], summary: JudgeSummary) -> dict[str, Any]:
    """The judge's row of `judge_report` over the rankings this run wrote (a shard's own pairs, not the judge's
    whole history), or over all its runs where this one wrote none; "scope" says which."""
    from preflab.labelling.judges.report import judge_report

    with sessions.begin() as session:
        (measures,) = judge_report(
            session, [summary.annotator_id], ranking_ids=summary.written or None, criterion=summary.criterion
        )
    return measures


def timed(judgement: Judgement, seconds: float) -> Judgement:
    """The judgement with each candidate's share of the judging time in its details (for the report).

    A judgement that measured its own (a panel's: its members' time) keeps it.
    """
    scores, details = judgement
    return scores, {c: {"seconds": round(seconds, 4), **(details.get(c) or {})} for c in {*scores, *details}}


def record_stats(session: Session, annotator_id: int, stats: dict[str, Any], replace: bool = False) -> dict[str, Any]:
    """Add a run's engine stats (`EngineStats.as_dict`, with its currency) to those stored on its annotator; returns
    the sums (`replace`: store `stats` as the sums, a panel's being its members' own).

    They live in the annotator's configuration under "engine" (what every run of this judge asked and cost,
    all runs together: `preflab.db.requests.added_stats`), read by `judge report`, `stats --judges`, `stats` and
    the report. The row is locked while it is updated, so shards finishing at once add up (Postgres; SQLite has
    one writer at a time).
    """
    from preflab.db.models import Annotator

    row = session.scalars(select(Annotator).where(Annotator.id == annotator_id).with_for_update()).one()
    config = dict(row.config or {})
    config["engine"] = added_stats(config.get("engine"), stats, replace)
    row.config = config
    return config["engine"]


def unread_reason(details: dict[str, Any] | None) -> str | None:
    """Why a candidate could not be read, from its details (the server's words, or a reply with no score)."""
    details = details or {}
    if details.get("reason"):
        return str(details["reason"])
    if details.get("failed_replies"):
        return f"no score in the reply {details['failed_replies'][0][:120]!r}"
    for entry in details.get("pairs", []):
        if entry.get("outcome") == "abstain" and entry.get("reason"):
            return str(entry["reason"])
    return None


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
    budget: ReadBudget | None = None,
) -> JudgeSummary:
    """Judge every prompt with two or more candidates that this run has not ranked yet.

    `judge` turns a batch of prompts into one judgement per prompt; each batch's
    rankings are written in their own transaction, so a crash keeps them. Each
    candidate's details record its share of its batch's judging time. A judgement of
    None (a server gave no answer after every retry) leaves its prompt unranked, for the
    next run to ask again (`unanswered`). A judgement that ranks nothing is stored as an
    abstention (`write_ranking`), counted in `abstained`.

    Args:
        stats: the run's engine stats so far (`EngineStats.as_dict`), read when the run ends:
            added to those stored on the judge's annotator, and given as the summary's "engine".
        budget: stop (`JudgeError`, once this batch is stored and the stats recorded) when more of this
            run's candidates could not be read than it allows; None: never stop.
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
    summary = JudgeSummary(run.kind, run.run_id, annotator_id, prompts=len(items), criterion=run.criterion)
    todo = [i for i, eid in zip(items, ids) if eid not in done]
    summary.kept = len(items) - len(todo)
    read = unread = 0
    stopped: str | None = None
    why: str | None = None  # the first reason a candidate could not be read
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
                    ranking_id, old = write_ranking(session, annotator_id, run, item, judgement)
                    scored = read_scores(judgement)
                    missed = [c for c in item.candidate_ids if c not in scored]
                    if len(scored) >= 2:
                        summary.ranked += 1
                        summary.written.append(ranking_id)
                    else:
                        summary.abstained += 1
                    summary.superseded += old
                    summary.unscored += len(missed)
                    read, unread = read + len(item.candidate_ids) - len(missed), unread + len(missed)
                    why = why or next((r for c in missed if (r := unread_reason(judgement[1].get(c)))), None)
            advance(len(batch))
            if budget is not None and budget.exceeded(read, unread):
                stopped = (
                    f"the {run.kind} judge ({run.model}) could not read {unread:,} of the {read + unread:,} candidates "
                    f"it judged in this run, more than --max-unreadable {budget.max_unreadable:g} allows, so it "
                    f"stopped asking (ranked {summary.ranked:,} prompts, {summary.abstained:,} abstained, "
                    f"{len(todo) - summary.ranked - summary.abstained:,} left)"
                    + (f"; the first it could not read: {why[:200]}" if why else "")
                    + ": check the judge's model and prompt, or raise --max-unreadable"
                )
                break
    summary.seconds = time.perf_counter() - start
    if stats is not None:
        summary.extra["engine"] = stats()
        with sessions.begin() as session:
            summary.extra["engine_total"] = record_stats(session, annotator_id, summary.extra["engine"])
    if stopped:
        raise JudgeError(stopped)
    return summary
