"""Label Studio's ML backend, library side: `model_version` answers /setup, `predict_tasks` answers /predict.

The protocol, as Label Studio 1.23 speaks it (`ml/api_connector.py`, `ml/models.py`) and as
label-studio-ml-backend serves it (`label_studio_ml/api.py`, `response.py`):

- Before every batch Label Studio posts /setup and takes `model_version` from the answer; it then
  sends only the tasks that hold no prediction of that version. So `model_version` must be cheap
  (a query or two, no model loaded) and the same until the model changes.
- /predict gets full task objects (`id`, `data`, …) and answers `{"results": [...]}`: one entry
  per task, in order. With any other count Label Studio drops the whole batch. An entry is one
  prediction (`{"result", "score", "model_version"}`) or a list of them; an empty list stores
  nothing for that task (Label Studio iterates over it), and is what a task gets that preflab
  cannot predict. Its task is then asked again next time, where `{"result": []}` would store an
  empty prediction and keep that task out of every later batch of the same version.
- Label Studio may validate the batch with label-studio-sdk's `validate_prediction` (the flag
  `fflag_feat_utc_210_prediction_validation_15082025`, off in 1.23) and then refuses all of it
  for one bad prediction, so each is checked here first and one that fails is sent as `[]`.
  A `score` must be in [0, 1].

The judge, and its name as `model_version`: `served.py`.

The tasks: a task preflab pushed is known by its id (`ls_tasks`); any other task (imported from a
file) is read as `ls sync` reads it (`parse.task_items`) and found by the content hashes of its
prompt and candidates. One whose prompt or any candidate is not stored gets `[]`. The judge's
newest valid ranking of the task's prompt is reused when it covers every candidate the task shows;
otherwise the judge ranks all the prompt's candidates and the ranking is stored as a `judge` run
stores it (the same annotator, run id and external id, superseding its older one), once per prompt
however many tasks show it. The result has the shape of the project's template, found from the
label config (`template_of`); the score is the mean, over the ranked candidates the task shows taken
in order, of σ(score − next score): the Bradley–Terry probability of each step, exact for a reward
model (trained with that loss) and monotone in the gap for other judges; 0.5 for a tie
(`predict.confidence`). A tie stays a tie (`predict.prediction_result`): one bucket, the Tie choice, or
in the plain ranker the order shown with a note; a judge's abstention (it read too little to rank) is
no prediction at all. A template with a Ranker per criterion gets the judge's one order in each
Ranker: the judge ranks once, by its own rubric, not per criterion.

The session belongs to the caller: the reads come first, then the judge, then the writes, so the
transaction holds no write lock while a model runs. Two calls that rank the same prompt at once
collide on the ranking's unique key; the loser's `in_transaction` runs it again and reuses it.
"""

from __future__ import annotations

import logging
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.bulk import lookup
from preflab.db.models import Annotator, AnnotatorKind, Candidate, LSTask, Prompt, Ranking, RankingItem, RankingStatus
from preflab.db.models.rankings import OVERALL
from preflab.db.pairs.build import tiers_from_scores
from preflab.db.store import chunks
from preflab.errors import Invalid, NotFound
from preflab.labelling.judges.base import Judgement, ensure_judge, ranks, read_scores, timed, write_ranking
from preflab.labelling.judges.table import JUDGES
from preflab.labelling.selection import PromptCandidates, prompts_with_candidates
from preflab.labelling.studio.parse import task_items
from preflab.labelling.studio.predict import confidence, prediction_errors, prediction_result
from preflab.labelling.studio.projects import find_project
from preflab.labelling.studio.served import NO_MODEL, ServedJudge, model_version, served_judge
from preflab.lm.engines import Engine
from preflab.lm.names import ModelCache
from preflab.templates import PAIRWISE, RANKER, bucket_names, ranker_buckets
from preflab.templates.criteria import RANKER_PREFIX

__all__ = [
    "NO_MODEL",
    "Plan",
    "ServedJudge",
    "judge_items",
    "model_version",
    "plan_predictions",
    "predict_tasks",
    "rank_prompts",
    "served_judge",
    "store_judgements",
    "stored_rankings",
    "template_of",
]

log = logging.getLogger(__name__)

PROMPTS_PER_BATCH = 8  # as a `judge` run batches its prompts


def template_of(label_config: str) -> str | None:
    """The preflab template a labelling config was made from (ranking, ranking_tiers, pairwise); None: another."""
    try:
        root = ET.fromstring(label_config or "")
    except ET.ParseError:
        return None
    tags = {(tag.tag, tag.get("name")) for tag in root.iter()}
    if ("Pairwise", PAIRWISE) in tags:
        return "pairwise"
    rankers = [name for kind, name in tags if kind == "Ranker"]
    if RANKER in rankers or (rankers and all(n.startswith(RANKER_PREFIX) for n in rankers)):
        return "ranking_tiers" if bucket_names(label_config) else "ranking"
    return None


@dataclass(frozen=True)
class Shown:
    """What a task shows: its prompt and candidates in order, and their item ids when not `ls push`'s own."""

    prompt_id: int
    order: tuple[int, ...]
    ids: dict[int, str] | None = None


def _task_id(task: Any) -> int | None:
    tid = task.get("id") if isinstance(task, dict) else None
    return tid if isinstance(tid, int) and not isinstance(tid, bool) else None


def resolve_tasks(session: Session, base_url: str, project_id: int, tasks: Sequence[Any]) -> list[Shown | None]:
    """What each task shows: by its `ls_tasks` row, else by content hash; None where it is not all stored."""
    known: dict[int, Shown] = {}
    try:
        project = find_project(session, base_url, project_id)
    except NotFound:  # a project preflab did not create: its tasks are known by their content only
        project = None
    if project is not None:
        ids = sorted({tid for tid in map(_task_id, tasks) if tid is not None})
        for part in chunks(ids):
            for tid, pid, order in session.execute(
                select(LSTask.task_id, LSTask.prompt_id, LSTask.shown_order).where(
                    LSTask.project_id == project.id, LSTask.task_id.in_(part)
                )
            ):
                known[tid] = Shown(pid, tuple(order))
    parsed = {}
    for n, task in enumerate(tasks):
        if _task_id(task) not in known and isinstance(task, dict):
            try:
                parsed[n] = task_items(task.get("data"))
            except Invalid:
                continue
    prompts = dict(
        lookup(
            session,
            Prompt.__table__,
            ("content_hash", "id"),
            "content_hash",
            sorted({items.prompt_key for items in parsed.values()}),
        )
    )
    candidates = {
        (pid, h): cid
        for cid, pid, h in lookup(
            session,
            Candidate.__table__,
            ("id", "prompt_id", "content_hash"),
            "prompt_id",
            sorted(set(prompts.values())),
        )
    }
    out: list[Shown | None] = []
    for n, task in enumerate(tasks):
        if _task_id(task) in known:
            out.append(known[_task_id(task)])
            continue
        items = parsed.get(n)
        pid = prompts.get(items.prompt_key) if items is not None else None
        order = [candidates.get((pid, h)) for h in items.reply_keys] if pid is not None else [None]
        out.append(None if None in order else Shown(pid, tuple(order), dict(zip(order, items.ids))))
    return out


@dataclass(frozen=True)
class Ranked:
    """A judge's ranking of a prompt: tiers of candidate ids (best first), their scores, and every candidate it saw."""

    tiers: list[list[int]]
    scores: dict[int, float]
    seen: frozenset[int]


def stored_rankings(session: Session, annotator: str, prompt_ids: set[int]) -> dict[int, Ranked]:
    """prompt id -> the AI annotator's newest valid overall ranking of it, or its newer abstention (a judge that read
    too little to rank: no tiers, so no prediction, and the prompt is not ranked again at every retrieve). The served
    judge ranks overall; the same judge's rankings by a criterion (`judge score --criteria`) are not its verdict."""
    aid = session.scalar(
        select(Annotator.id).where(Annotator.kind == AnnotatorKind.ai.value, Annotator.name == annotator)
    )
    if aid is None or not prompt_ids:
        return {}
    newest: dict[int, int] = {}
    for part in chunks(sorted(prompt_ids)):
        for rid, pid in session.execute(
            select(Ranking.id, Ranking.prompt_id).where(
                Ranking.annotator_id == aid,
                Ranking.criterion == OVERALL,
                Ranking.status.in_([RankingStatus.valid.value, RankingStatus.skipped.value]),
                Ranking.prompt_id.in_(part),
            )
        ):
            newest[pid] = max(rid, newest.get(pid, rid))
    items: dict[int, list[tuple[int, int | None, float | None]]] = {rid: [] for rid in newest.values()}
    for rid, cid, tier, score in lookup(
        session, RankingItem.__table__, ("ranking_id", "candidate_id", "tier", "score"), "ranking_id", list(items)
    ):
        items[rid].append((cid, tier, score))
    out = {}
    for pid, rid in newest.items():
        by_tier: dict[int, list[int]] = {}
        for cid, tier, _ in items[rid]:
            if tier is not None:
                by_tier.setdefault(tier, []).append(cid)
        out[pid] = Ranked(
            [sorted(by_tier[t]) for t in sorted(by_tier)],
            {cid: score for cid, tier, score in items[rid] if tier is not None and score is not None},
            frozenset(cid for cid, _, _ in items[rid]),
        )
    return out


def judge_items(
    served: ServedJudge, items: list[PromptCandidates], cache: ModelCache | None = None, engine: Engine | None = None
) -> list[Judgement | None]:
    """The served judge's judgement of each prompt's candidates (no database: the caller holds no transaction).

    A judge that reads a causal LM ranks on `engine` (open on its `served.engine`; in process, one is opened on
    `cache`), and leaves None for a prompt a server gave no answer for after every retry: not stored, asked again
    by the next retrieve. A scorer reads its model from `cache`.
    """
    judge = JUDGES[served.kind]
    if judge.scorer:
        model, tokenizer = (cache or ModelCache()).get(served.location, scorer=True)
        rank = judge.make(model, tokenizer, served.config)
    else:
        rank = judge.on_engine(engine or served.open(cache=cache), served.config)
    judgements: list[Judgement | None] = []
    for batch in chunks(items, PROMPTS_PER_BATCH):
        began = time.perf_counter()
        done = rank(list(batch))
        per_candidate = (time.perf_counter() - began) / max(1, sum(len(i.candidate_ids) for i in batch))
        judgements.extend(None if judgement is None else timed(judgement, per_candidate) for judgement in done)
    return judgements


def store_judgements(
    session: Session, served: ServedJudge, items: list[PromptCandidates], judgements: list[Judgement]
) -> dict[int, Ranked]:
    """Store each judgement as the judge's `judge` run stores it; returns the rankings, by prompt id."""
    annotator_id = ensure_judge(session, served.run)
    out = {}
    for item, judgement in zip(items, judgements):
        if judgement is None:  # no answer from the server: left for the next retrieve
            continue
        write_ranking(session, annotator_id, served.run, item, judgement)
        scores = read_scores(judgement) if ranks(judgement) else {}  # an abstention ranks nothing
        out[item.prompt_id] = Ranked(tiers_from_scores(scores), scores, frozenset(item.candidate_ids))
    return out


def rank_prompts(
    session: Session, served: ServedJudge, prompt_ids: list[int], cache: ModelCache | None = None
) -> dict[int, Ranked]:
    """Rank each prompt's candidates with the served judge and store the rankings as its `judge` run does."""
    items = prompts_with_candidates(session, prompt_ids, require_reference=JUDGES[served.kind].needs_reference)
    if not items:
        return {}
    out = store_judgements(session, served, items, judge_items(served, items, cache))
    log.debug("%s ranked %d prompts for Label Studio", served.annotator, len(out))
    return out


@dataclass
class Plan:
    """What /predict knows before any model runs: the judge, the template, what each task shows, stored rankings."""

    served: ServedJudge | None
    template: str | None
    label_config: str
    shown: list[Shown | None]
    rankings: dict[int, Ranked]

    @property
    def stale(self) -> dict[int, frozenset[int]]:
        """prompt id -> the candidates its tasks show, for each prompt whose stored ranking misses one of them
        (empty when the judge cannot rank)."""
        if self.served is None or self.served.kind is None:
            return {}
        out: dict[int, frozenset[int]] = {}
        for s in self.shown:
            if s is not None and not set(s.order) <= getattr(self.rankings.get(s.prompt_id), "seen", frozenset()):
                out[s.prompt_id] = out.get(s.prompt_id, frozenset()) | frozenset(s.order)
        return out

    def results(self, leave: frozenset[int] | set[int] = frozenset()) -> list[dict | list]:
        """/predict's `results`, in task order; the tasks of the prompts in `leave` get `[]` (asked again later)."""
        if self.served is None or self.template is None:
            return [[] for _ in self.shown]
        errors = prediction_errors(self.label_config)
        buckets = bucket_names(self.label_config)
        rankers = ranker_buckets(self.label_config) or None
        out: list[dict | list] = []
        for s in self.shown:
            ranked = self.rankings.get(s.prompt_id) if s is not None and s.prompt_id not in leave else None
            result = None
            if ranked is not None and len({c for t in ranked.tiers for c in t} & set(s.order)) >= 2:
                result = prediction_result(self.template, ranked.tiers, s.order, buckets, s.ids, rankers)
            prediction = (
                None
                if result is None
                else {
                    "result": result,
                    "model_version": self.served.name,
                    "score": confidence(ranked.tiers, ranked.scores, s.order),
                }
            )
            if prediction is not None and errors(prediction):
                log.debug("a prediction does not fit the labelling config: %s", errors(prediction)[0])
                prediction = None
            out.append(prediction if prediction is not None else [])
        return out


def plan_predictions(
    session: Session,
    base_url: str,
    project_id: int,
    label_config: str,
    tasks: Sequence[Any],
    *,
    judge: str | None = None,
    **judge_options,
) -> Plan:
    """The reads of /predict: the served judge, each task's prompt and candidates, the judge's stored rankings."""
    served = served_judge(session, judge, **judge_options)
    template = template_of(label_config)
    if served is None or template is None or not tasks:
        return Plan(served, template, label_config, [None] * len(tasks), {})
    shown = resolve_tasks(session, base_url, project_id, tasks)
    rankings = stored_rankings(session, served.annotator, {s.prompt_id for s in shown if s is not None})
    return Plan(served, template, label_config, shown, rankings)


def predict_tasks(
    session: Session,
    base_url: str,
    project_id: int,
    label_config: str,
    tasks: Sequence[Any],
    *,
    judge: str | None = None,
    cache: ModelCache | None = None,
    **judge_options,
) -> list[dict | list]:
    """/predict's `results`: for each task, in order, its prediction or `[]` (see the module docstring).

    Every prompt the judge has not ranked is ranked first, however long it takes (the server
    instead ranks within a time budget: `preflab.server.scoring`).

    Args:
        base_url, project_id: the Label Studio server and project the tasks belong to.
        label_config: the project's labelling config, as Label Studio sends it.
        tasks: the task objects Label Studio sends (`id`, `data`).
        judge, judge_options: the judge (`served_judge`: `model`, `default`, config fields).
        cache: models already loaded (the server keeps one, so a model loads once).
    """
    plan = plan_predictions(session, base_url, project_id, label_config, tasks, judge=judge, **judge_options)
    stale = plan.stale
    if stale:
        plan.rankings.update(rank_prompts(session, plan.served, sorted(stale), cache))
    return plan.results()
