"""`ls predict`: AI-judge rankings as Label Studio predictions (pre-annotations).

Each judge's newest valid rankings of a task's prompt become one prediction on
the task, written in the result shape of the project's template, with the
judge's name as `model_version`. The runs of one judge asked about several criteria
(an annotator each) are one judge here (`prediction_names`). Each Ranker shows the
judge's ranking by its own criterion (`rank` overall, `rank_<criterion>` that one): a
judge that ranked by harmlessness never fills the overall ranker. A criterion's Ranker
that the judge did not rank by shows the judge's overall order, its one verdict, as the
backend's live judge gives; with neither, that Ranker is left for the annotator
(`fill_rankers`). A (task, judge) pair that already has a
prediction is left alone, so predicting again uploads only what is new.

Label Studio answers 201 even when it drops predictions that do not fit the
labelling config, so each one is checked first with label-studio-sdk's own
validator (the one the server uses), and only the count the server reports
as created is reported as uploaded.

A prediction shows what the judge decided, and a tie is a tie: one bucket in the
tiers template, the Tie choice in the pairwise one. The plain ranker can only show an
order, so tied candidates keep the order the task shows them in (no order the judge did
not choose), the prediction's score is a tie's (0.5 for each tied step: `confidence`),
and the result carries a note saying which responses are tied (`tie_note`), so the
judge's indifference is not taken for its verdict.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import OVERALL, Annotator, AnnotatorKind, LSTask, Ranking, RankingItem, RankingStatus
from preflab.errors import InputError, Invalid
from preflab.labelling.judges.identity import same_judge
from preflab.labelling.studio.client import LabelStudioClient
from preflab.labelling.studio.criteria import ranker_criterion
from preflab.labelling.studio.projects import ProjectInfo, find_project
from preflab.labelling.studio.task_data import item_id as default_item_id
from preflab.templates import LIST, PAIRWISE, PAIRWISE_TARGET, RANKER, TIE, TIE_VALUE, ranker_buckets

BATCH = 500


def prediction_result(
    template: str,
    tiers: Sequence[Sequence[int]],
    shown: Sequence[int],
    buckets: Sequence[str] | None = None,
    ids: Mapping[int, str] | None = None,
    rankers: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
) -> list[dict] | None:
    """A Label Studio result saying `tiers` (candidate ids, best first) for a task showing `shown`.

    Candidates of the task the ranking does not rank go last (ranking), stay
    unranked (tiers), or make the prediction impossible (pairwise: None). Returns
    None when the template cannot say the ranking (more tiers than buckets).
    `ids` names each candidate's item in the task (default: the ids `ls push` gives, `c<id>`).
    `rankers` names the template's Rankers (default: its one, `rank`), each with its buckets when a
    mapping (`preflab.templates.ranker_buckets`): a template with a Ranker per criterion gets the
    same order in each, as the judge gives one order.
    """
    names = list(rankers or (RANKER,))
    own = rankers if isinstance(rankers, Mapping) else {}
    item_id = ids.__getitem__ if ids is not None else default_item_id
    position = {cid: n for n, cid in enumerate(shown)}
    tiers = [sorted((c for c in tier if c in position), key=position.get) for tier in tiers]
    tiers = [t for t in tiers if t]
    ranked = {c for t in tiers for c in t}
    unranked = [c for c in shown if c not in ranked]
    if template == "ranking":
        order = [item_id(c) for t in tiers for c in t] + [item_id(c) for c in unranked]
        note = {"meta": {"text": [n]}} if (n := tie_note(tiers, shown)) else {}
        return [
            {"from_name": name, "to_name": LIST, "type": "ranker", "value": {"ranker": {name: order}}} | note
            for name in names
        ]
    if template == "ranking_tiers":
        out = []
        for name in names:
            tiers_of = list(own.get(name) or buckets or [])
            if len(tiers) > len(tiers_of):
                return None
            value = {b: [item_id(c) for c in (tiers[n] if n < len(tiers) else [])] for n, b in enumerate(tiers_of)}
            value["_"] = [item_id(c) for c in unranked]
            out.append({"from_name": name, "to_name": LIST, "type": "ranker", "value": {"ranker": value}})
        return out
    if template == "pairwise":
        if len(shown) != 2 or unranked:
            return None
        if len(tiers) == 1:
            return [{"from_name": TIE, "to_name": "prompt", "type": "choices", "value": {"choices": [TIE_VALUE]}}]
        selected = "left" if tiers[0][0] == shown[0] else "right"
        return [
            {"from_name": PAIRWISE, "to_name": PAIRWISE_TARGET, "type": "pairwise", "value": {"selected": selected}}
        ]
    raise InputError(f"predictions need a project made from a preflab template, not {template!r}")


def tie_note(tiers: Sequence[Sequence[int]], shown: Sequence[int]) -> str | None:
    """What a plain ranker's prediction says of its ties (responses numbered as the task shows them); None: none."""
    position = {cid: n for n, cid in enumerate(shown)}
    tied = [sorted(position[c] + 1 for c in tier if c in position) for tier in tiers]
    tied = [group for group in tied if len(group) > 1]
    if not tied:
        return None
    if len(tied) == 1 and len(tied[0]) == len(shown):
        return (
            f"A tie: the judge found {'both' if len(shown) == 2 else f'all {len(shown)}'} responses equally good. "
            "They are in the order shown, not ranked: the order is yours to choose."
        )
    groups = "; ".join(", ".join(map(str, group[:-1])) + f" and {group[-1]}" for group in tied)
    return f"A tie: the judge found responses {groups} equally good. They keep the order shown, not ranked."


def confidence(tiers: Sequence[Sequence[int]], scores: Mapping[int, float], shown: Sequence[int]) -> float | None:
    """The mean σ(score − next score) down the ranked candidates the task shows (0.5 a step for a tie)."""
    visible = set(shown)
    ordered = [scores[c] for tier in tiers for c in sorted(tier) if c in visible and c in scores]
    steps = [1 / (1 + math.exp(-min(max(a - b, -60.0), 60.0))) for a, b in itertools.pairwise(ordered)]
    return round(sum(steps) / len(steps), 4) if steps else None


@dataclass
class PredictSummary:
    uploaded: int = 0  # predictions Label Studio says it created
    existing: int = 0
    unfit: int = 0  # (task, judge) the template cannot show: too many tiers, too few shown ranked, no criterion of it
    invalid: int = 0  # predictions the labelling config's validator rejects: not sent
    refused: int = 0  # predictions sent that Label Studio did not create
    judges: dict[str, int] = field(default_factory=dict)  # created per judge (as sent, when all were created)
    reasons: list[str] = field(default_factory=list)  # why predictions were invalid (first few)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def prediction_errors(label_config: str):
    """A function: prediction -> the reasons label-studio-sdk's validator rejects it ([] when it fits)."""
    if not label_config.strip():
        return lambda prediction: []
    from label_studio_sdk.label_interface import LabelInterface

    interface = LabelInterface(label_config)
    return lambda prediction: list(interface.validate_prediction(prediction, return_errors=True) or [])


Judged = tuple[list[list[int]], dict[int, float]]  # a ranking's tiers (candidate ids, best first) and scores


Member = tuple[str, str | None, str | None, dict | None]  # an AI annotator's name, judge kind, model and config


def prediction_names(annotators: Mapping[int, Member]) -> dict[int, str]:
    """Each AI annotator's prediction (its `model_version`), from annotator id -> (name, judge kind, model, config):
    the annotators of one judge asked about several criteria (and overall) make one prediction, named
    `judge:<kind>:<key>:<model>` after what they share (`same_judge`); any other makes its own, named as it is."""
    families: dict[str | None, list[int]] = {}
    for aid, (_, kind, model, config) in annotators.items():
        families.setdefault(same_judge(kind, model, config), []).append(aid)
    names = {aid: member[0] for aid, member in annotators.items()}
    for key, members in families.items():
        if key is not None and len(members) > 1:
            _, kind, model, _ = annotators[members[0]]
            names.update(dict.fromkeys(members, f"judge:{kind}:{key}:{(model or '')[-200:]}"))
    return names


def _judge_rankings(session: Session, prompt_ids: set[int], judge: str | None) -> dict[tuple[int, str, str], Judged]:
    """(prompt id, prediction name, criterion) -> (tiers, scores) of the judge's newest valid ranking of the prompt
    by that criterion (`prediction_names`: a judge asked about several criteria is one prediction). `judge` keeps
    one AI annotator (its name) or one judge's runs (their prediction's name)."""
    query = (
        select(Ranking.id, Ranking.prompt_id, Ranking.annotator_id, Ranking.criterion)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .where(Annotator.kind == AnnotatorKind.ai.value, Ranking.status == RankingStatus.valid.value)
        .order_by(Ranking.id)
    )
    newest: dict[tuple[int, int, str], int] = {}
    for rid, pid, aid, criterion in session.execute(query):
        if pid in prompt_ids:
            newest[(pid, aid, criterion)] = rid  # ordered by id: the last one is the newest
    aids = {aid for _, aid, _ in newest}
    annotators = {
        aid: (name, kind, model, config)
        for aid, name, kind, model, config in session.execute(
            select(Annotator.id, Annotator.name, Annotator.judge_kind, Annotator.model, Annotator.config).where(
                Annotator.id.in_(aids)
            )
        )
    }
    named = prediction_names(annotators)
    if judge is not None:  # one annotator by its name (its own prediction), else one judge's runs by theirs
        alone = {aid: name for aid, (name, *_) in annotators.items() if name == judge}
        named = alone or {aid: name for aid, name in named.items() if name == judge}
        newest = {key: rid for key, rid in newest.items() if key[1] in named}
    tiers: dict[int, dict[int, list[int]]] = {rid: {} for rid in newest.values()}
    scores: dict[int, dict[int, float]] = {rid: {} for rid in newest.values()}
    ids = list(tiers)
    for start in range(0, len(ids), 500):
        for rid, cid, tier, score in session.execute(
            select(RankingItem.ranking_id, RankingItem.candidate_id, RankingItem.tier, RankingItem.score).where(
                RankingItem.ranking_id.in_(ids[start : start + 500]), RankingItem.tier.is_not(None)
            )
        ):
            tiers[rid].setdefault(tier, []).append(cid)
            # A ranking with no scores (imported): its tiers are the scores, so a tie still scores 0.5 a step.
            scores[rid][cid] = -float(tier) if score is None else score
    return {
        (pid, named[aid], criterion): ([tiers[rid][t] for t in sorted(tiers[rid])], scores[rid])
        for (pid, aid, criterion), rid in newest.items()
    }


def ranker_criteria(rankers: Sequence[str]) -> dict[str, str]:
    """Each Ranker's criterion (`rank` overall, `rank_<criterion>` that one); raises InputError for one that names
    none beside others (a template preflab did not make)."""
    try:
        return {name: ranker_criterion(name, len(rankers) == 1) for name in rankers}
    except Invalid as exc:
        raise InputError(f"cannot predict for this project: {exc}") from exc


def fill_rankers(criteria: Mapping[str, str], by_criterion: Mapping[str, Judged]) -> dict[str, Judged]:
    """Which of a judge's rankings (by criterion) each Ranker (name -> its criterion) shows: its criterion's, else
    the judge's overall one, its one verdict; a Ranker with neither is left out. The overall Ranker shows only an
    overall ranking."""
    shown = {}
    for name, criterion in criteria.items():
        ranked = by_criterion.get(criterion) or by_criterion.get(OVERALL)
        if ranked is not None:
            shown[name] = ranked
    return shown


def _task_result(
    project: ProjectInfo,
    rankers: Mapping[str, Sequence[str]],
    criteria: Mapping[str, str],
    by_criterion: Mapping[str, Judged],
    shown: list[int],
) -> tuple[list[dict] | None, float | None]:
    """A judge's prediction of one task (None: the template cannot show it) and its score, the least sure of its
    Rankers'. `rankers` is the template's, each with its buckets (none: the pairwise template), and `criteria` each
    one's criterion (`ranker_criteria`; the pairwise template's one answer is overall)."""
    filled = fill_rankers(criteria, by_criterion)
    result, sure = [], []
    for name, (tiers, scores) in filled.items():
        if len({c for t in tiers for c in t} & set(shown)) < 2:
            continue
        own = {name: rankers[name]} if rankers else None
        one = prediction_result(project.template, tiers, shown, project.buckets, rankers=own)
        if one is None:
            continue
        result += one
        if (score := confidence(tiers, scores, shown)) is not None:
            sure.append(score)
    return (result or None), (min(sure) if sure else None)


def predict(
    sessions: sessionmaker[Session],
    client: LabelStudioClient,
    project_id: int | None,
    judge: str | None = None,
    reporter: Reporter = SILENT,
) -> tuple[ProjectInfo, PredictSummary]:
    """The `ls predict` job: upload the judges' rankings of the project's tasks as predictions.

    The database is read in one short transaction before anything is uploaded,
    so no transaction stays open while Label Studio is called.

    Args:
        project_id: the Label Studio project (default: the only one preflab knows on the server).
        judge: only this judge's rankings (its annotator name); default: every AI judge's.
    """
    summary = PredictSummary()
    with sessions.begin() as session:
        project = find_project(session, client.base_url, project_id)
        tasks = session.execute(
            select(LSTask.task_id, LSTask.prompt_id, LSTask.shown_order)
            .where(LSTask.project_id == project.id)
            .order_by(LSTask.task_id)
        ).all()
        rankings = _judge_rankings(session, {pid for _, pid, _ in tasks}, judge)
    if judge is not None and not rankings:
        raise InputError(f"no valid ranking by judge {judge!r} of this project's prompts")
    done = {(p.task, p.model_version) for p in client.predictions(project.project_id)}
    by_prompt: dict[int, dict[str, dict[str, Judged]]] = {}
    for (pid, name, criterion), ranked in rankings.items():
        by_prompt.setdefault(pid, {}).setdefault(name, {})[criterion] = ranked
    errors = prediction_errors(project.label_config)
    rankers = ranker_buckets(project.label_config)
    # Each Ranker's criterion, once; a Ranker that names none is one sentence before anything is sent.
    criteria = ranker_criteria(list(rankers)) if rankers else {RANKER: OVERALL}
    uploads = []
    for task_id, pid, shown in tasks:
        for name, by_criterion in by_prompt.get(pid, {}).items():
            if (task_id, name) in done:
                summary.existing += 1
                continue
            result, score = _task_result(project, rankers, criteria, by_criterion, shown)
            if result is None:
                summary.unfit += 1
                continue
            prediction = {"task": task_id, "model_version": name, "result": result}
            if score is not None:
                prediction["score"] = score
            problems = errors(prediction)
            if problems:
                summary.invalid += 1
                if len(summary.reasons) < 5 and problems[0] not in summary.reasons:
                    summary.reasons.append(problems[0])
                continue
            uploads.append(prediction)
            summary.judges[name] = summary.judges.get(name, 0) + 1
    with reporter.progress("uploading predictions", len(uploads)) as advance:
        for start in range(0, len(uploads), BATCH):
            batch = uploads[start : start + BATCH]
            created = client.import_predictions(project.project_id, batch)
            if created is None:  # a server that does not say: count what it holds now
                created = _stored(client, project.project_id, batch)
            summary.uploaded += created
            summary.refused += len(batch) - created
            advance(len(batch))
    if summary.refused:
        summary.judges = _stored_by_judge(client, project.project_id, uploads)
    return project, summary


def _stored_by_judge(client: LabelStudioClient, project_id: int, sent: list[dict]) -> dict[str, int]:
    """Of the predictions `sent`, how many of each judge Label Studio now holds."""
    wanted = {(p["task"], p["model_version"]) for p in sent}
    counts: dict[str, int] = {}
    for p in client.predictions(project_id):
        if (p.task, p.model_version) in wanted:
            counts[p.model_version] = counts.get(p.model_version, 0) + 1
    return counts


def _stored(client: LabelStudioClient, project_id: int, sent: list[dict]) -> int:
    return sum(_stored_by_judge(client, project_id, sent).values())
