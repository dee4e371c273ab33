"""`preflab demo toy --method rl`: the notebook's own last step, RL against the reward model, on the digit world."""

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import ModelVersion, TrainingRun
from tests.toy_data import one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

# What `demo toy --json` reports, whichever way the policy learned.
KEYS = {
    "rm_accuracy",
    "p_preferred_before",
    "p_preferred_after",
    "kl_to_base",
    "base_rule_rate_after",
    "base_rule_rate_before",
    "stop_rate_after",
    "stop_rate_before",
    "dpo_heldout_reward_accuracy",
    "rankings",
    "imported",
    "pairs",
    "dataset",
    "held_out_prompts",
    "reward_model_version",
    "policy_model_version",
    "method",
    "policy_metrics",
    "workdir",
    "seconds",
    "settings",
    "world",
}


def test_rl_learns_the_hidden_preference_from_the_reward_model_and_keeps_the_language(sqlite_url, tmp_path):
    from preflab.db.engine import open_database, session_factory

    result = CliRunner().invoke(
        cli,
        ["--database-url", sqlite_url, "demo", "toy", "--method", "rl", "--workdir", str(tmp_path / "toy"), "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report) == KEYS and report["method"] == "rl" and report["world"] == "digits"
    assert report["rm_accuracy"] >= 0.95
    # The seed's result: the preferred first digit from about 1/4 to at least 0.9 …
    assert 0.2 <= report["p_preferred_before"] <= 0.3 and report["p_preferred_after"] >= 0.9
    # … while at least 0.8 of the sampled outputs still follow the base rule, at a reported KL to the base.
    assert report["base_rule_rate_after"] >= 0.8 and report["stop_rate_after"] >= 0.9
    assert 0.5 < report["kl_to_base"] < 3.0
    metrics = report["policy_metrics"]
    assert metrics["heldout_reward_policy"] > metrics["heldout_reward_start"] + 2  # fresh samples, reward model
    assert metrics["beta"] == 0.1 and metrics["reward_model_version"] == report["reward_model_version"]
    # The implicit reward β·log(π/π_ref) that DPO optimises directly: RL raised it on held-out pairs too.
    assert report["dpo_heldout_reward_accuracy"] >= 0.9

    with session_factory(open_database(sqlite_url)).begin() as session:
        runs = session.scalars(select(TrainingRun).order_by(TrainingRun.id)).all()
        assert [(r.kind, r.status) for r in runs] == [("reward-grouped", "succeeded"), ("rl", "succeeded")]
        assert session.scalars(select(ModelVersion.kind).order_by(ModelVersion.id)).all() == [
            "base",
            "reward",
            "policy",
        ]
