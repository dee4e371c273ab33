"""`preflab demo toy`: reward model and DPO on the digit world, where the right answer is known."""

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import ModelVersion, TrainingRun
from tests.toy_data import one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def run(url, *args):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_toy_world_learns_the_hidden_preference_and_keeps_the_language(sqlite_url, tmp_path):
    from preflab.db.engine import open_database, session_factory

    report = run(sqlite_url, "demo", "toy", "--workdir", tmp_path / "toy", "--json")
    assert report["pairs"] > 3000 and report["held_out_prompts"] >= 150
    # The reward model ranks held-out pairs by the hidden preference.
    assert report["rm_accuracy"] >= 0.95
    # Before DPO the base language gives the preferred first digit 1/4; after, nearly always.
    assert 0.2 <= report["p_preferred_before"] <= 0.3
    assert report["p_preferred_after"] >= 0.9
    assert report["dpo_heldout_reward_accuracy"] >= 0.9
    # …while the later digits keep the base rule and sentences still end after four digits.
    assert (
        report["base_rule_rate_after"] >= 0.85
        and report["base_rule_rate_after"] >= report["base_rule_rate_before"] - 0.1
    )
    assert report["stop_rate_after"] >= 0.9
    # Moving one digit from 1/4 to ~1 costs about log 4 nats: the policy moved, but not far.
    assert 0.5 < report["kl_to_base"] < 3.0

    sessions = session_factory(open_database(sqlite_url))
    with sessions.begin() as session:
        runs = session.scalars(select(TrainingRun).order_by(TrainingRun.id)).all()
        assert [(r.kind, r.status) for r in runs] == [("reward-grouped", "succeeded"), ("dpo", "succeeded")]
        kinds = session.scalars(select(ModelVersion.kind).order_by(ModelVersion.id)).all()
        assert kinds == ["base", "reward", "policy"]

    # The policy beats its base model on the held-out prompts, as judged by the toy's reward model.
    judged = run(
        sqlite_url,
        "train",
        "eval",
        report["policy_model_version"],
        "--judge",
        "reward-model",
        "--judge-model",
        report["reward_model_version"],
        "--max-new-tokens",
        6,
        "--json",
    )
    assert judged["prompts"] == report["held_out_prompts"] and judged["win_rate"] >= 0.7
    assert judged["against"].startswith("/") and judged["judge"] == "reward-model"

    # The reward-model bench agrees, with an interval, and finds the gain over an untrained reward model real.
    from tests.tiny_models import tiny_reward_model

    with sessions.begin() as session:
        session.add(
            ModelVersion(name="untrained", kind="reward", path=str(tiny_reward_model(tmp_path / "untrained", seed=0)))
        )
    bench = run(sqlite_url, "train", "eval", report["reward_model_version"], "--compare", "untrained", "--json")
    assert bench["bench"]["accuracy"] == pytest.approx(report["rm_accuracy"]) and bench["bench"]["low"] >= 0.9
    assert {row["group"] for row in bench["bench"]["by_annotator_kind"]} == {"human"}  # the simulated annotator
    compared = bench["compare"]
    assert compared["low"] > 0.2 and compared["p_value"] < 0.01
