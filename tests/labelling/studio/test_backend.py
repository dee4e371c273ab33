"""The ML backend's library side: /setup's model_version and /predict's predictions, on a tiny reward model."""

from __future__ import annotations

import json

import pytest
from label_studio_sdk.label_interface import LabelInterface
from sqlalchemy import func, select, update

from preflab.db.conversation import assistant_turn, prompt_columns, prompt_hash, reply_columns, reply_hash, user_turn
from preflab.db.models import Annotator, ModelVersion, Ranking
from preflab.db.store import ensure_candidates, ensure_prompts
from preflab.labelling.judges.base import external_id
from preflab.labelling.judges.reward_model import RewardModelConfig
from preflab.labelling.judges.run import run_judge
from preflab.labelling.studio.backend import NO_MODEL, model_version, predict_tasks, template_of
from preflab.labelling.studio.projects import ensure_project
from preflab.labelling.studio.push import _record, plan_tasks
from preflab.lm.names import ModelCache
from preflab.templates import TEMPLATES, label_config
from tests.tiny_models import tiny_reward_model, tiny_tokenizer

BASE = "http://127.0.0.1:8080"
PROMPTS = {
    "What is the capital of France?": ["Paris.", "London.", "It is Berlin, of course."],
    "How many legs does a spider have?": ["Eight.", "Six legs.", "A spider has eight legs."],
}


@pytest.fixture(scope="module")
def reward_models(tmp_path_factory):
    """Two tiny reward models that score differently: versions 1 and 2."""
    folder = tmp_path_factory.mktemp("backend-rm")
    tokenizer = tiny_tokenizer()
    return [tiny_reward_model(folder / f"rm{n}", seed=n, tokenizer=tokenizer) for n in (0, 1)]


def add_reward_version(session, name: str, path, current: bool = True) -> None:
    """A reward model version, made the current one as `preflab retrain` makes it."""
    if current:
        session.execute(update(ModelVersion).where(ModelVersion.kind == "reward").values(is_current=False))
    session.add(ModelVersion(name=name, kind="reward", path=str(path), is_current=current))


def store_prompts(session, prompts=PROMPTS) -> dict[str, int]:
    """The prompts and their candidates; returns candidate text -> id."""
    pids = ensure_prompts(session, {prompt_hash(user_turn(p)): prompt_columns(user_turn(p)) for p in prompts})
    ids = ensure_candidates(
        session,
        {
            (pids[prompt_hash(user_turn(p))], reply_hash(assistant_turn(r))): reply_columns(assistant_turn(r))
            for p, replies in prompts.items()
            for r in replies
        },
    )
    return {
        r: ids[(pids[prompt_hash(user_turn(p))], reply_hash(assistant_turn(r)))]
        for p, replies in prompts.items()
        for r in replies
    }


def pushed_tasks(session, template: str, project_id: int = 7) -> list[dict]:
    """The project's tasks as `ls push` builds and records them, as Label Studio sends them to /predict."""
    project = ensure_project(
        session, BASE, project_id, title=template, template=template, label_config=label_config(template)
    )
    planned, _ = plan_tasks(session, project)
    rows = [(1000 + n, t.prompt_id, t.set_hash, t.order) for n, t in enumerate(planned)]
    _record(session, project, rows)
    return [{"id": tid, "project": project_id, "data": t.data} for (tid, *_), t in zip(rows, planned)]


@pytest.fixture
def store(sessions, reward_models):
    with sessions.begin() as session:
        ids = store_prompts(session)
        add_reward_version(session, "reward-1", reward_models[0])
    return ids


def judge_rankings(session) -> list[Ranking]:
    return list(
        session.scalars(
            select(Ranking)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.kind == "ai")
            .order_by(Ranking.id)
        )
    )


def order_of(prediction: dict, template: str) -> list[str] | str:
    value = prediction["result"][0]["value"]
    if template == "pairwise":
        return value.get("selected") or value["choices"][0]
    ranker = value["ranker"]
    return ranker["rank"] if template == "ranking" else [i for k in sorted(ranker) if k != "_" for i in ranker[k]]


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_gets_the_reward_models_ranking_stored_as_its_judge_run(template, sessions, store):
    config = label_config(template)
    with sessions.begin() as session:
        tasks = pushed_tasks(session, template)
        results = predict_tasks(session, BASE, 7, config, tasks)
    assert len(results) == len(tasks) == (6 if template == "pairwise" else 2)
    interface = LabelInterface(config)
    for task, prediction in zip(tasks, results):
        assert prediction["model_version"] == "reward-1"
        assert 0.5 <= prediction["score"] <= 1
        assert interface.validate_prediction({"task": task["id"], **prediction}, return_errors=True) == []
    with sessions.begin() as session:
        rankings = judge_rankings(session)
        # One ranking per prompt (a pairwise project has three tasks per prompt), of all its candidates.
        assert len(rankings) == len(PROMPTS)
        by_prompt = {r.prompt_id: r.tiers() for r in rankings}
        for r in rankings:
            cids = sorted(i.candidate_id for i in r.items)
            assert (r.source, r.status, r.annotator.judge_kind) == ("judge", "valid", "reward-model")
            assert r.external_id == external_id(r.judge_run, r.prompt_id, cids)
    for task, prediction in zip(tasks, results):  # each prediction says the stored ranking
        tiers = by_prompt[int(task["data"]["preflab_task"].split(":")[0])]
        shown = [item["id"] for item in task["data"]["items"]]
        best_first = [f"c{c}" for t in tiers for c in t if f"c{c}" in shown]
        if template == "pairwise":
            assert order_of(prediction, template) == ("left" if best_first[0] == shown[0] else "right")
        else:
            assert order_of(prediction, template) == best_first
    # `preflab judge reward-model reward-1` finds these rankings its own: it has nothing left to rank.
    judged = run_judge(sessions, "reward-model", RewardModelConfig(), "reward-1")
    assert (judged.summary.ranked, judged.summary.kept) == (0, len(PROMPTS))


def test_a_stored_ranking_is_reused_without_loading_the_judge(sessions, store):
    with sessions.begin() as session:
        tasks = pushed_tasks(session, "ranking")
        first = predict_tasks(session, BASE, 7, label_config("ranking"), tasks)
    cache = ModelCache()
    with sessions.begin() as session:
        again = predict_tasks(session, BASE, 7, label_config("ranking"), tasks, cache=cache)
        assert len(judge_rankings(session)) == len(PROMPTS)
        assert session.scalar(select(func.count()).select_from(Annotator)) == 1
    assert again == first
    assert cache.loaded == {}  # the judge never ran


def test_order_is_kept_with_known_file_imported_and_unknown_tasks(sessions, store):
    config = label_config("ranking")
    with sessions.begin() as session:
        known = pushed_tasks(session, "ranking")
    # A task imported from a file: the same texts, its own item ids, no `ls_tasks` row.
    imported = {
        "id": 5001,
        "data": {
            "prompt": "How many legs does a spider have?",
            "items": [
                {"id": "a", "body": "Six legs."},
                {"id": "b", "body": "Eight."},
                {"id": "z", "body": "A spider has eight legs."},
            ],
        },
    }
    unknown_prompt = {
        "id": 5002,
        "data": {"prompt": "Never stored?", "items": [{"id": "a", "body": "Paris."}, {"id": "b", "body": "London."}]},
    }
    unknown_reply = {
        "id": 5003,
        "data": {
            "prompt": "What is the capital of France?",
            "items": [{"id": "a", "body": "Paris."}, {"id": "b", "body": "Rome."}],
        },
    }
    no_data = {"id": 5004}
    tasks = [known[0], imported, unknown_prompt, no_data, unknown_reply, known[1], "not a task"]
    with sessions.begin() as session:
        results = predict_tasks(session, BASE, 7, config, tasks)
    assert len(results) == len(tasks)
    assert [bool(r) for r in results] == [True, True, False, False, False, True, False]
    assert results[2] == results[3] == results[4] == results[6] == []
    (imported_result,) = results[1]["result"]
    assert sorted(imported_result["value"]["ranker"]["rank"]) == ["a", "b", "z"]
    assert LabelInterface(config).validate_prediction(results[1], return_errors=True) == []
    spider = next(t for t in known if t["data"]["prompt"].startswith("How many"))
    by_id = {item["id"]: item["body"] for item in spider["data"]["items"]}
    bodies = {item["id"]: item["body"] for item in imported["data"]["items"]}
    same_task = results[0] if spider is known[0] else results[5]
    assert [by_id[i] for i in order_of(same_task, "ranking")] == [bodies[i] for i in order_of(results[1], "ranking")]


def test_model_version_is_stable_and_follows_a_new_reward_version(sessions, store, reward_models):
    with sessions.begin() as session:
        assert model_version(session, None) == model_version(session, None) == "reward-1"
        tasks = pushed_tasks(session, "ranking")
        predict_tasks(session, BASE, 7, label_config("ranking"), tasks)
    with sessions.begin() as session:
        assert model_version(session, None) == "reward-1"  # predicting changes nothing
        add_reward_version(session, "reward-9", reward_models[1], current=False)  # a manual `train reward`
    with sessions.begin() as session:
        assert model_version(session, None) == "reward-1"  # the current version wins over a newer one
        add_reward_version(session, "reward-2", reward_models[1])
    with sessions.begin() as session:
        assert model_version(session, None) == "reward-2"
        results = predict_tasks(session, BASE, 7, label_config("ranking"), tasks)
        assert {r["model_version"] for r in results} == {"reward-2"}
        models = [r.annotator.model for r in judge_rankings(session)]
    assert sorted(models) == ["reward-1"] * len(PROMPTS) + ["reward-2"] * len(PROMPTS)


def test_without_a_reward_model_every_task_gets_nothing(sessions):
    with sessions.begin() as session:
        store_prompts(session)
        tasks = pushed_tasks(session, "ranking")
        assert model_version(session, None) == NO_MODEL
        assert predict_tasks(session, BASE, 7, label_config("ranking"), tasks) == [[], []]
        assert judge_rankings(session) == []


def test_a_judge_named_by_kind_or_by_its_annotator_name(sessions, store, reward_models):
    path = str(reward_models[1])
    with sessions.begin() as session:
        tasks = pushed_tasks(session, "ranking_tiers")
        name = model_version(session, "reward-model", model=path)
        assert model_version(session, None, model=path) == name
        assert name.startswith("judge:reward-model:") and name.endswith(path)  # a model that is no version
        first = predict_tasks(session, BASE, 7, label_config("ranking_tiers"), tasks, judge="reward-model", model=path)
    assert {r["model_version"] for r in first} == {name}
    cache = ModelCache()
    with sessions.begin() as session:
        assert model_version(session, name) == name
        again = predict_tasks(session, BASE, 7, label_config("ranking_tiers"), tasks, judge=name, cache=cache)
    assert again == first and cache.loaded == {}


def test_a_custom_labelling_config_gets_nothing(sessions, store):
    custom = '<View><Text name="t" value="$prompt"/><Choices name="c" toName="t"><Choice value="ok"/></Choices></View>'
    assert [template_of(label_config(t)) for t in TEMPLATES] == list(TEMPLATES)
    assert template_of(custom) is None and template_of("not xml") is None
    with sessions.begin() as session:
        tasks = pushed_tasks(session, "ranking")
        assert predict_tasks(session, BASE, 7, custom, tasks) == [[], []]


def test_imported_ai_rankings_are_served_as_they_are(sessions, cli, tmp_path):
    """An AI annotator that is no judge run (rankings imported from a file) cannot rank: only its own are served, its
    overall ranking, not a newer one of the same judge by a criterion."""
    row = {
        "prompt": "What is the capital of France?",
        "responses": PROMPTS["What is the capital of France?"],
        "annotator": "judge-alpha",
        "annotator_kind": "ai",
    }
    rows = [row | {"ranking": [[2], [0], [1]]}, row | {"ranking": [[1], [0], [2]], "criterion": "harmlessness"}]
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    cli("import", "rankings", path)
    with sessions.begin() as session:
        ids = store_prompts(session)
        tasks = pushed_tasks(session, "ranking")
        assert model_version(session, "judge-alpha") == "judge-alpha"
        results = predict_tasks(session, BASE, 7, label_config("ranking"), tasks, judge="judge-alpha")
    france = [n for n, t in enumerate(tasks) if t["data"]["prompt"].startswith("What")]
    assert [bool(r) for r in results] == [n in france for n in range(len(tasks))]
    (result,) = results[france[0]]["result"]
    best_first = ("It is Berlin, of course.", "Paris.", "London.")
    assert result["value"]["ranker"]["rank"] == [f"c{ids[r]}" for r in best_first]
