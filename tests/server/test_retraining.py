"""Retraining on arrival, and the model version Label Studio shows."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from preflab.cli import cli as root
from preflab.db.models import ModelVersion
from tests.labelling.ls_helpers import session
from tests.server.conftest import SECRET, wait_until


# The child `preflab retrain` takes seconds to start: once, on SQLite (the count is the retrain job's own query).
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_failed_retrain_leaves_the_current_version_serving_and_health_says_so(
    app_client, cli, db_url, sample_rankings, tmp_path, tiny_lm
):
    cli("import", "rankings", sample_rankings)  # people's rankings: more than --retrain-every
    config = tmp_path / "retrain.toml"
    config.write_text(
        f'min_new = 1\n[export]\ntest_size = 0.2\n[reward]\nmodel = "{tmp_path / "no-such-model"}"\nmax_steps = 1\n',
        encoding="utf-8",
    )
    client = app_client(background=True, model=tiny_lm, sync_every="off", retrain_every=3, retrain_config=str(config))

    def retrain() -> dict:
        return client.get("/health").json()["retrain"]

    wait_until(lambda: retrain()["state"] == "failed", timeout=120)
    health = client.get("/health").json()
    serving = health["model_version"]  # nothing trained: the default model's likelihood judge
    assert health["status"] == "UP" and serving.startswith("judge:likelihood:")  # still serving
    assert "no-such-model" in retrain()["last_error"] and retrain()["attempts"] == 1
    assert client.post("/setup", json={"project": "1.1"}, auth=("preflab", SECRET)).json() == {"model_version": serving}
    # It waits for as many new rankings again before the next try, instead of failing in a loop.
    client.app.state.services.model.loop.wake()
    wait_until(lambda: client.get("/health").json()["model"]["runs"] >= 2)
    assert retrain()["state"] == "failed" and retrain()["attempts"] == 1 and retrain()["new_rankings"] == 0


@pytest.fixture
def label_studio_url(ls_env) -> str:
    return ls_env.url


@pytest.fixture
def label_studio_url(ls_env) -> str:
    return ls_env.url


def test_a_new_model_version_is_shown_in_label_studio_projects_that_showed_ours(app_client, db_url, ls_env):
    made = CliRunner().invoke(
        root, ["--database-url", db_url, "ls", "init", "--title", "served", "--json"], catch_exceptions=False
    )
    assert made.exit_code == 0, made.output
    project = json.loads(made.stdout)["project_id"]
    sdk = ls_env.sdk()
    [task] = sdk.projects.import_tasks(
        project, request=[{"system": "", "dialogue": "q?", "items": []}], return_task_ids=True
    ).task_ids
    for version in ("reward-v1", "reward-v2"):  # predictions Label Studio stored from each version
        sdk.predictions.create(task=task, result=[], model_version=version)
    sdk.projects.update(project, model_version="reward-v1")
    # `preflab retrain` under cron made reward-v2 current while the project still shows reward-v1.
    with session(db_url) as s:
        s.add_all(
            [
                ModelVersion(name="reward-v1", kind="reward", path="/models/reward-v1"),
                ModelVersion(name="reward-v2", kind="reward", path="/models/reward-v2", is_current=True),
            ]
        )
        s.commit()

    client = app_client(background=True, sync_every="off")
    wait_until(lambda: client.get("/health").json()["model"]["shown_in_label_studio"] == "reward-v2")
    assert sdk.projects.get(project).model_version == "reward-v2"
    assert client.get("/health").json()["model_version"] == "reward-v2"
    assert client.post("/setup", json={"project": f"{project}.1"}, auth=("preflab", SECRET)).json() == {
        "model_version": "reward-v2"
    }
