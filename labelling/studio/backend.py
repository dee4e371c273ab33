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

The judge, and its name as `model_version`:

- `judge=None` (or `"reward-model"` with no `model`): the reward-model judge on the current reward
  model version (the one `preflab retrain` made current; without one, the newest reward version).
  Retraining changes it, and so `model_version`. Without any reward model the name is `NO_MODEL`
  and every task gets `[]`, so a new user can connect before training anything.
- a kind of judge (`preflab.labelling.judges.table.JUDGES`) with `model=` and that kind's config
  fields: that judge configuration, exactly as `preflab judge KIND` would run it (`model=` alone:
  the reward-model judge on that model).
- an AI annotator's name (`judge:KIND:RUN:MODEL`, as `ls predict --judge` and `judge report` show
  it): that judge, rebuilt from its stored configuration (refused if it no longer rebuilds to the
  same run). An AI annotator that is no judge run (imported AI rankings) only has its stored
  rankings served.

`model_version` is the judge's annotator name (the name `ls predict` uploads under, so Label Studio
does not ask again for what `ls predict` sent), or the model version's name when the judge's model
is a trained model version (a reward model, a pair ranker).

The tasks: a task preflab pushed is known by its id (`ls_tasks`); any other task (imported from a
file) is read as `ls sync` reads it (`parse.task_items`) and found by the content hashes of its
prompt and candidates. One whose prompt or any candidate is not stored gets `[]`. The judge's
newest valid ranking of the task's prompt is reused when it covers every candidate the task shows;
otherwise the judge ranks all the prompt's candidates and the ranking is stored as a `judge` run
stores it (the same annotator, run id and external id, superseding its older one), once per prompt
however many tasks show it. The result has the shape of the project's template, found from the
label config (`template_of`); the score is the mean, over the ranked candidates the task shows taken
in order, of σ(score − next score): the Bradley–Terry probability of each step, exact for a reward
model (trained with that loss) and monotone in the gap for other judges; 0.5 for a tie.

The session belongs to the caller: the reads come first, then the judge, then the writes, so the
transaction holds no write lock while a model runs. Two calls that rank the same prompt at once
collide on the ranking's unique key; the loser's `in_transaction` runs it again and reuses it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.bulk import lookup
from preflab.db.ingest.lines import Invalid
from preflab.db.models import Annotator, AnnotatorKind, Candidate, LSTask, ModelVersion, Prompt, Ranking, \
    RankingItem, RankingStatus
from preflab.db.pairs.build import tiers_from_scores
from preflab.db.store import chunks
from preflab.errors import ConfigError, NotFound
from preflab.labelling.judges.base import JudgeRun, ensure_judge, timed, write_ranking
from preflab.labelling.judges.run import STORED_NAMES, identity, make_judge
from preflab.labelling.judges.table import JUDGES
from preflab.labelling.selection import prompts_with_candidates
from preflab.labelling.studio.parse import task_items
from preflab.labelling.studio.predict import prediction_errors, prediction_result
from preflab.labelling.studio.projects import find_project
from preflab.lm.names import ModelCache, resolve_model
from preflab.templates import PAIRWISE, RANKER, bucket_names

log = logging.getLogger(__name__)

NO_MODEL = "no-reward-model"  # model_version while no reward model exists to serve
REWARD_JUDGE = "reward-model"
PROMPTS_PER_BATCH = 8  # as a `judge` run batches its prompts


@dataclass(frozen=True)
class ServedJudge:
    """The judge that predicts, resolved from the server's `--judge` (no model loaded)."""

    name: str            # its model_version
    annotator: str       # the AI annotator whose rankings it serves
    kind: str | None     # a key of JUDGES; None: it cannot rank (its stored rankings only)
    run: JudgeRun | None = None
    location: str | None = None  # what to load
    config: Any = None


def _build_config(kind: str, values: dict[str, Any]):
    try:
        return JUDGES[kind].config(**values)
    except TypeError as exc:
        raise ConfigError(f"judge {kind!r} has no such option: {exc}") from None


def _reward_version(session: Session) -> ModelVersion | None:
    """The current reward model version; with none marked current, the newest one (a saved one either way)."""
    return session.scalars(select(ModelVersion).where(ModelVersion.kind == "reward", ModelVersion.path.is_not(None))
                           .order_by(ModelVersion.is_current.desc(), ModelVersion.id.desc()).limit(1)).first()


def _served(kind: str, label: str, location: str, version_id: int | None, config) -> ServedJudge:
    run = JudgeRun(kind, label, identity(kind, config))
    name = label if version_id is not None and JUDGES[kind].scorer else run.annotator_name
    return ServedJudge(name, run.annotator_name, kind, run, location, config)


def _rebuilt(session: Session, row: Annotator, options: dict[str, Any]) -> ServedJudge:
    """The judge run behind an AI annotator, from its stored configuration (and speed-only `options`)."""
    if row.judge_kind not in JUDGES or not row.model or not isinstance(row.config, dict):
        return ServedJudge(row.name, row.name, None)
    kind = row.judge_kind
    names = {f.name for f in dataclasses.fields(JUDGES[kind].config)}
    stored = {({v: k for k, v in STORED_NAMES.items()}).get(k, k): v for k, v in row.config.items()}
    config = _build_config(kind, {**{k: v for k, v in stored.items() if k in names}, **options})
    label, location, version_id = resolve_model(session, row.model, record=False)
    served = _served(kind, label, location, version_id, config)
    if served.run.run_id != row.config.get("run_id"):
        raise ConfigError(f"judge {row.name!r} no longer rebuilds to the same run (its prompt, model or "
                          "options changed since it ran): name its kind and model instead")
    return served


def served_judge(session: Session, judge: str | None = None, *, model: str | None = None,
                 **config) -> ServedJudge | None:
    """The judge `judge` names (see the module docstring); None when no reward model exists to serve.

    Args:
        judge: None (the current reward model), a kind of judge, or an AI annotator's name.
        model: the judge's model (a model version, embedded name, path or hub id).
        config: fields of the judge kind's config dataclass.
    """
    if judge is None and model is not None:
        judge = REWARD_JUDGE  # a model alone is a reward model to score with
    if judge is None or (judge == REWARD_JUDGE and model is None):
        version = _reward_version(session)
        if version is None:
            return None
        return _served(REWARD_JUDGE, version.name, version.path, version.id, _build_config(REWARD_JUDGE, config))
    if judge in JUDGES:
        if model is None:
            raise ConfigError(f"the {judge} judge needs a model: give its name or path")
        label, location, version_id = resolve_model(session, model, record=False)
        return _served(judge, label, location, version_id, _build_config(judge, config))
    row = session.scalar(select(Annotator).where(Annotator.kind == AnnotatorKind.ai.value, Annotator.name == judge))
    if row is None:
        raise NotFound(f"no judge {judge!r}: name a kind of judge ({', '.join(JUDGES)}) or an AI annotator "
                       "(`preflab judge report` lists them)")
    return _rebuilt(session, row, config)


def model_version(session: Session, judge: str | None = None, **judge_options) -> str:
    """What /setup answers: the served judge's name (see the module docstring). Cheap: no model is loaded."""
    served = served_judge(session, judge, **judge_options)
    return NO_MODEL if served is None else served.name


def template_of(label_config: str) -> str | None:
    """The preflab template a labelling config was made from (ranking, ranking_tiers, pairwise); None: another."""
    try:
        root = ET.fromstring(label_config or "")
    except ET.ParseError:
        return None
    tags = {(tag.tag, tag.get("name")) for tag in root.iter()}
    if ("Pairwise", PAIRWISE) in tags:
        return "pairwise"
    if ("Ranker", RANKER) in tags:
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
            for tid, pid, order in session.execute(select(LSTask.task_id, LSTask.prompt_id, LSTask.shown_order).where(
                    LSTask.project_id == project.id, LSTask.task_id.in_(part))):
                known[tid] = Shown(pid, tuple(order))
    parsed = {}
    for n, task in enumerate(tasks):
        if _task_id(task) not in known and isinstance(task, dict):
            try:
                parsed[n] = task_items(task.get("data"))
            except Invalid:
                continue
    prompts = dict(lookup(session, Prompt.__table__, ("content_hash", "id"), "content_hash",
                          sorted({items.prompt_key for items in parsed.values()})))
    candidates = {(pid, h): cid for cid, pid, h in lookup(
        session, Candidate.__table__, ("id", "prompt_id", "content_hash"), "prompt_id", sorted(set(prompts.values())))}
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
    """prompt id -> the AI annotator's newest valid ranking of it."""
    aid = session.scalar(select(Annotator.id).where(Annotator.kind == AnnotatorKind.ai.value,
                                                    Annotator.name == annotator))
    if aid is None or not prompt_ids:
        return {}
    newest: dict[int, int] = {}
    for part in chunks(sorted(prompt_ids)):
        for rid, pid in session.execute(select(Ranking.id, Ranking.prompt_id).where(
                Ranking.annotator_id == aid, Ranking.status == RankingStatus.valid.value, Ranking.prompt_id.in_(part))):
            newest[pid] = max(rid, newest.get(pid, rid))
    items: dict[int, list[tuple[int, int | None, float | None]]] = {rid: [] for rid in newest.values()}
    for rid, cid, tier, score in lookup(session, RankingItem.__table__, ("ranking_id", "candidate_id", "tier", "score"),
                                        "ranking_id", list(items)):
        items[rid].append((cid, tier, score))
    out = {}
    for pid, rid in newest.items():
        by_tier: dict[int, list[int]] = {}
        for cid, tier, _ in items[rid]:
            if tier is not None:
                by_tier.setdefault(tier, []).append(cid)
        out[pid] = Ranked([sorted(by_tier[t]) for t in sorted(by_tier)],
                          {cid: score for cid, tier, score in items[rid] if tier is not None and score is not None},
                          frozenset(cid for cid, _, _ in items[rid]))
    return out


def rank_prompts(session: Session, served: ServedJudge, prompt_ids: list[int],
                 cache: ModelCache | None = None) -> dict[int, Ranked]:
    """Rank each prompt's candidates with the served judge and store the rankings as its `judge` run does."""
    judge = JUDGES[served.kind]
    items = prompts_with_candidates(session, prompt_ids, require_reference=judge.needs_reference)
    if not items:
        return {}
    model, tokenizer = (cache or ModelCache()).get(served.location, scorer=judge.scorer)
    rank = make_judge(served.kind, model, tokenizer, served.config)
    judgements = []
    for batch in chunks(items, PROMPTS_PER_BATCH):
        began = time.perf_counter()
        done = rank(list(batch))
        per_candidate = (time.perf_counter() - began) / max(1, sum(len(i.candidate_ids) for i in batch))
        judgements.extend(timed(judgement, per_candidate) for judgement in done)
    annotator_id = ensure_judge(session, served.run)
    out = {}
    for item, judgement in zip(items, judgements):
        write_ranking(session, annotator_id, served.run, item, judgement)
        scores = {cid: s for cid, s in judgement[0].items() if s is not None}
        out[item.prompt_id] = Ranked(tiers_from_scores(scores), scores, frozenset(item.candidate_ids))
    log.debug("%s ranked %d prompts for Label Studio", served.annotator, len(out))
    return out


def confidence(tiers: Sequence[Sequence[int]], scores: dict[int, float], shown: Sequence[int]) -> float | None:
    """The mean σ(score − next score) down the ranked candidates the task shows (0.5 a step for a tie)."""
    visible = set(shown)
    ordered = [scores[c] for tier in tiers for c in sorted(tier) if c in visible and c in scores]
    steps = [1 / (1 + math.exp(-min(max(a - b, -60.0), 60.0))) for a, b in zip(ordered, ordered[1:])]
    return round(sum(steps) / len(steps), 4) if steps else None


def predict_tasks(session: Session, base_url: str, project_id: int, label_config: str, tasks: Sequence[Any], *,
                  judge: str | None = None, cache: ModelCache | None = None, **judge_options) -> list[dict | list]:
    """/predict's `results`: for each task, in order, its prediction or `[]` (see the module docstring).

    Args:
        base_url, project_id: the Label Studio server and project the tasks belong to.
        label_config: the project's labelling config, as Label Studio sends it.
        tasks: the task objects Label Studio sends (`id`, `data`).
        judge, judge_options: the judge (`served_judge`: `model`, config fields).
        cache: models already loaded (the server keeps one, so a model loads once).
    """
    served = served_judge(session, judge, **judge_options)
    template = template_of(label_config)
    if served is None or template is None or not tasks:
        return [[] for _ in tasks]
    shown = resolve_tasks(session, base_url, project_id, tasks)
    prompt_ids = {s.prompt_id for s in shown if s is not None}
    rankings = stored_rankings(session, served.annotator, prompt_ids)
    stale = sorted({s.prompt_id for s in shown
                    if s is not None and not set(s.order) <= getattr(rankings.get(s.prompt_id), "seen", set())})
    if stale and served.kind is not None:
        rankings.update(rank_prompts(session, served, stale, cache))
    errors = prediction_errors(label_config)
    buckets = bucket_names(label_config)
    out: list[dict | list] = []
    for s in shown:
        ranked = rankings.get(s.prompt_id) if s is not None else None
        result = None
        if ranked is not None and len({c for t in ranked.tiers for c in t} & set(s.order)) >= 2:
            result = prediction_result(template, ranked.tiers, s.order, buckets, s.ids)
        prediction = None if result is None else {
            "result": result, "score": confidence(ranked.tiers, ranked.scores, s.order), "model_version": served.name}
        if prediction is not None and errors(prediction):
            log.debug("a prediction does not fit the labelling config: %s", errors(prediction)[0])
            prediction = None
        out.append(prediction if prediction is not None else [])
    return out
