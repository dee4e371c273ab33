"""`preflab bon sample --engine openai`: the policy's draws from a server, scored by the reward model here.

Against the fault-injecting app (tests/fault_app.py), on SQLite and Postgres.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Candidate, ModelVersion, Ranking
from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401 (fixtures)
from tests.tiny_models import tiny_reward_model, tiny_tokenizer

PROMPTS = ["What is the capital of France?", "How many legs does a spider have?", "Summarise: " + "words " * 100]


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory):
    return tiny_reward_model(tmp_path_factory.mktemp("bon-engine") / "rm", tokenizer=tiny_tokenizer())


@pytest.fixture
def prompts(sessions, reward_model, tmp_path):
    with sessions.begin() as session:
        session.add(ModelVersion(name="rm-tiny", kind="reward", path=str(reward_model)))
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


def bon(url: str, prompts, *args) -> list[str]:
    return [
        "bon",
        "sample",
        "--reward-model",
        "rm-tiny",
        "--engine",
        "openai",
        "--api-base",
        url,
        "--policy",
        "fault-model",
        "--prompts",
        str(prompts),
        "--n",
        "4",
        *map(str, args),
    ]


def test_draws_from_a_server_are_scored_stored_and_never_asked_twice(cli, sessions, fault_server, prompts):
    url, faults = fault_server(max_context=300)  # the third prompt is over it
    out = json.loads(cli(*bon(url, prompts), "--json").stdout)
    assert (out["prompts"], out["samples"], out["quarantined"], out["failed"]) == (2, 8, 1, 0)
    assert out["policy"] == "openai:fault-model" and out["kl_beirami"] is None
    # Each draw is a request of its own: 8 answered, 4 refused for the prompt itself.
    assert (out["engine"]["requests"], out["engine"]["quarantined"], faults.asked["chat"]) == (8, 4, 12)
    ((reason, draws),) = out["reasons"].items()
    assert "maximum context length is 300" in reason and draws == 1
    with sessions.begin() as session:
        candidates = session.scalars(select(Candidate)).all()
        assert {c.model for c in candidates} == {"openai:fault-model"}
        assert {session.get(ModelVersion, c.model_version_id).name for c in candidates} == {"openai:fault-model"}
        rankings = session.scalars(select(Ranking)).all()
        assert len(rankings) == 2
        for ranking in rankings:
            assert sum(i.details["copies"] for i in ranking.items) == 4
            assert all(i.details["logprob"] is None and i.score is not None for i in ranking.items)
            assert sum(i.details["selected"] for i in ranking.items) == 1

    again = cli(*bon(url, prompts))
    assert faults.asked["chat"] == 12  # the done prompts are not drawn again, the refused one is read back
    assert "quarantined 1 prompt the server refused" in again.output
    assert "openai fault-model: 0 requests (4 answered from the store)" in again.output


def test_top_k_is_refused_on_a_server_before_anything_is_asked(cli, fault_server, prompts):
    url, faults = fault_server()
    result = cli(*bon(url, prompts, "--top-k", 5), expect_ok=False)
    assert result.exit_code != 0 and "--top-k cannot be sent to a server" in result.output
    assert faults.asked["chat"] == 0
