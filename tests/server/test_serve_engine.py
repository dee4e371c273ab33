"""`serve --judge KIND --engine openai`: /predict's judge ranks on an OpenAI-compatible server (the fault app), its
rankings stored as `preflab judge KIND --engine openai` stores them, and re-used: a second retrieve asks nothing."""

from __future__ import annotations

import json
import logging

import pytest

from preflab.lm.engines import EngineConfig
from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401  (fixtures)
from tests.server.conftest import SECRET, basic, unknown_to_label_studio
from tests.server.predicting import hh_rows, import_hh, is_valid, judge_rankings, predict_body, pushed_tasks

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def predictions(client, tasks: list[dict], project: int) -> list:
    answer = client.post("/predict", headers=basic(SECRET), json=predict_body(tasks, project))
    assert answer.status_code == 200, answer.text
    return answer.json()["results"]


def asked(faults) -> int:
    return sum(faults.asked.values())


def stored_spend(db_url: str, name: str) -> dict:
    """The engine stats stored on the judge annotator `name` (all its runs, serve's rounds among them)."""
    from sqlalchemy import select

    from preflab.db.engine import open_sessions
    from preflab.db.models import Annotator

    with open_sessions(db_url, existing=True).begin() as session:
        return session.scalars(select(Annotator.config).where(Annotator.name == name)).one()["engine"]


def paid(faults) -> int:
    """Requests that ask the model something (not its list of models)."""
    return faults.asked["chat"] + faults.asked["completions"]


@pytest.mark.parametrize("kind", ["pairwise", "likelihood"])
def test_serve_judges_on_a_server_and_a_second_retrieve_reuses_its_rankings(
    kind, app_client, cli, db_url, label_studio_url, fault_server, tmp_path, caplog
):
    url, faults = fault_server()
    import_hh(db_url, hh_rows(5), tmp_path)
    project = unknown_to_label_studio()
    tasks = pushed_tasks(db_url, label_studio_url, project)
    engine = EngineConfig(engine="openai", api_base=url, model="fault-model")

    with caplog.at_level(logging.INFO, logger="preflab.server"):
        client = app_client(judge=kind, engine=engine, sync_every="off", predict_budget="off")
        first = predictions(client, tasks, project)
    health = client.get("/health").json()
    name = health["model_version"]
    assert name.startswith(f"judge:{kind}:") and name.endswith(":openai:fault-model")
    assert health["serving"] == f"the {kind} judge on openai:fault-model at {url}"
    assert health["predictions"]["engine"] == "openai" and health["predictions"]["served_model"] == "fault-model"
    assert f"/predict serves the {kind} judge on openai:fault-model at {url}" in caplog.text
    assert len(first) == len(tasks) and all(is_valid(r) and r["model_version"] == name for r in first)
    assert paid(faults) > 0
    # What the server was asked is added to the judge's annotator, where `judge` runs add theirs.
    spent = health["predictions"]["engine_stats"]
    assert spent["requests"] > 0 and stored_spend(db_url, name)["requests"] == spent["requests"]
    ranked = judge_rankings(db_url, name)
    assert len(ranked) == 5 and {status for _, status in ranked} == {"valid"}

    # Label Studio asks again: every task is answered from the stored rankings, the server is not asked.
    before = asked(faults)
    assert predictions(client, tasks, project) == first
    assert asked(faults) == before and len(judge_rankings(db_url, name)) == 5

    # The same annotator `preflab judge KIND --engine openai` ranks as: it finds everything ranked.
    paid_before = paid(faults)
    out = json.loads(
        cli("judge", kind, "--engine", "openai", "--api-base", url, "--model", "fault-model", "--json").output
    )
    assert name.split(":")[2] == out["run_id"] and out["ranked"] == 0 and out["kept"] == 5
    assert out["engine_total"]["requests"] == spent["requests"] + out["engine"]["requests"]
    assert paid(faults) - paid_before <= (kind == "likelihood")  # its one probe of prompt log-probabilities


def test_serve_takes_the_engine_options_and_never_a_key(cli):
    text = cli("serve", "--help").output
    for option in ("--engine", "--api-base", "--model", "--concurrency", "--timeout", "--max-retries"):
        assert option in text
    assert "--api-key" not in text and "OPENAI_API_KEY" in text
    result = cli(
        "serve",
        "--judge",
        "pairwise",
        "--engine",
        "openai",
        "--api-base",
        "ftp://example.org",
        "--model",
        "m",
        expect_ok=False,
    )
    assert result.exit_code != 0 and "--api-base 'ftp://example.org' is not an http(s) URL" in result.output
