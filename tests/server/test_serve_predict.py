"""/predict in time for Label Studio, on a real store: the judge that serves with nothing trained, its model loaded
as the server starts, an answer within the budget, and the rest ranked in the background for the next retrieve.

Label Studio 1.23 waits ML_TIMEOUT_PREDICT (100 s) for /predict, then says "Retrieved N predictions" and stores
none; it stores nothing for a task answered `[]` and sends that task again at the next retrieve.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from preflab.server.config import ServeConfig
from tests.labelling.ls_fixtures import make_cli
from tests.server.conftest import DEFAULT_SERVED, SECRET, basic, unknown_to_label_studio, wait_until
from tests.server.predicting import hh_rows, import_hh, is_valid, judge_rankings, predict_body, pushed_tasks
from tests.tiny_models import embedded_model_cache  # noqa: F401  (fixture)

LABEL_STUDIO_TIMEOUT = 100.0  # ML_TIMEOUT_PREDICT's default in Label Studio 1.23 (ml/api_connector.py)


@pytest.fixture
def one_torch_thread():
    """This machine's two cores are shared: torch's second thread only waits on the other processes (the embedded
    model ranked a reply in 0.5 s on one thread, 2.5 s on two, with the load at 8)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def predictions(client, tasks: list[dict], project: int) -> list:
    answer = client.post("/predict", headers=basic(SECRET), json=predict_body(tasks, project))
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert len(results) == len(tasks)  # one entry per task, in order: with any other count Label Studio drops all
    return results


def health(client) -> dict:
    return client.get("/health").json()


def test_the_default_budget_is_well_inside_label_studios_timeout():
    assert ServeConfig().predict_seconds <= 30 < LABEL_STUDIO_TIMEOUT
    assert ServeConfig(predict_budget="off").predict_seconds is None  # rank every task first, however long


def test_what_is_not_ranked_within_the_budget_is_ranked_in_the_background_for_the_next_retrieve(
    app_client, db_url, label_studio_url, tiny_lm, tmp_path, caplog
):
    import_hh(db_url, hh_rows(12), tmp_path)
    project = unknown_to_label_studio()
    tasks = pushed_tasks(db_url, label_studio_url, project)
    client = app_client(background=True, model=tiny_lm, sync_every="off", predict_budget="0.01s")
    wait_until(lambda: health(client)["predictions"]["loaded"], 60)  # as the server started: no request asked
    name = health(client)["model_version"]
    assert name.startswith("judge:likelihood:") and name.endswith(tiny_lm)

    with caplog.at_level(logging.INFO, logger="preflab.server"):
        first = predictions(client, tasks, project)
        left = [task for task, result in zip(tasks, first) if result == []]
        assert left and all(is_valid(r) and r["model_version"] == name for r in first if r != [])
        assert f"{len(left)} left for later" in caplog.text
        wait_until(lambda: health(client)["predictions"]["queued"] == 0, 60)
        assert f"the {len(left)} prompts left for later are ranked" in caplog.text
    assert health(client)["predictions"]["left_for_later"] == 0

    # Label Studio's next retrieve sends the tasks that hold no prediction of this version: every one gets its own.
    second = predictions(client, left, project)
    assert all(is_valid(r) and r["model_version"] == name for r in second)
    ranked = judge_rankings(db_url, name)
    assert len(ranked) == 12 and {status for _, status in ranked} == {"valid"}  # each prompt once
    # Asked again for every task, it answers each from the store: the first answers unchanged.
    again = predictions(client, tasks, project)
    assert all(is_valid(r) for r in again) and [a for a, f in zip(again, first) if f] == [f for f in first if f]


@pytest.mark.slow
@pytest.mark.usefixtures("embedded_model_cache", "one_torch_thread")
def test_with_nothing_trained_the_embedded_models_likelihood_judge_serves_and_says_so(
    app_client, db_url, label_studio_url, tmp_path, caplog
):
    import_hh(db_url, hh_rows(3), tmp_path)
    project = unknown_to_label_studio()
    tasks = pushed_tasks(db_url, label_studio_url, project)
    with caplog.at_level(logging.INFO, logger="preflab.server"):
        client = app_client(background=True, sync_every="off")
    assert (
        f"/predict serves the likelihood judge on smollm2-135m-instruct (the default model: no reward model is "
        f"trained yet) as model version {DEFAULT_SERVED}, answering within 20 s"
    ) in caplog.text
    assert health(client)["model_version"] == DEFAULT_SERVED
    assert health(client)["serving"] == (
        "the likelihood judge on smollm2-135m-instruct (the default model: no reward model is trained yet)"
    )
    wait_until(lambda: health(client)["predictions"]["loaded"], 600)  # a fresh model cache converts the GGUF first

    results = predictions(client, tasks, project)
    assert all(is_valid(r) and r["model_version"] == DEFAULT_SERVED for r in results)
    assert [status for _, status in judge_rankings(db_url, DEFAULT_SERVED)] == ["valid"] * 3
    # `preflab judge likelihood` (the README's warm-up) is this very judge: it finds every prompt ranked.
    out = json.loads(make_cli(db_url)("judge", "likelihood", "--json").stdout)
    assert (f"judge:{out['judge']}:{out['run_id']}:smollm2-135m-instruct", out["ranked"], out["kept"]) == (
        DEFAULT_SERVED,
        0,
        3,
    )


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # time, not storage: the store is tested above on both
@pytest.mark.usefixtures("embedded_model_cache", "one_torch_thread")
def test_70_tasks_are_answered_inside_label_studios_timeout_and_the_next_retrieve_stores_the_rest(
    app_client, db_url, label_studio_url, tmp_path
):
    import_hh(db_url, hh_rows(70), tmp_path)
    project = unknown_to_label_studio()
    tasks = pushed_tasks(db_url, label_studio_url, project)
    client = app_client(background=True, sync_every="off")  # the model loads as the server starts

    began = time.monotonic()
    first = predictions(client, tasks, project)  # the first click, at once
    took = time.monotonic() - began
    assert took < 30, f"the first /predict of 70 tasks took {took:.1f} s"
    assert all(r == [] or (is_valid(r) and r["model_version"] == DEFAULT_SERVED) for r in first)

    wait_until(lambda: health(client)["predictions"]["queued"] == 0, 900)
    left = [task for task, result in zip(tasks, first) if result == []]
    began = time.monotonic()
    second = predictions(client, left, project)
    assert time.monotonic() - began < 10  # all stored: no model runs
    assert all(is_valid(r) and r["model_version"] == DEFAULT_SERVED for r in second)
    assert len(judge_rankings(db_url, DEFAULT_SERVED)) == 70
