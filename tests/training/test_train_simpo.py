"""`preflab train simpo`: TRL's CPO trainer with the SimPO loss, reference-free, recorded like DPO."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import ModelVersion, TrainingRun
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

FAST = [
    "--max-steps",
    16,
    "--per-device-train-batch-size",
    8,
    "--learning-rate",
    2e-3,
    "--logging-steps",
    4,
    "--max-length",
    16,
    "--use-cpu",
    "--beta",
    2.0,
    "--simpo-gamma",
    0.5,
]


def run(url, *args, expect_ok=True):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    if expect_ok:
        assert result.exit_code == 0, result.output
    return result


def mean_margin(model_path, pairs, beta=2.0) -> float:
    """SimPO's own reward margin: β/|y|·log π(y|x) of chosen minus rejected, averaged over the pairs."""
    from preflab.lm.loading import load_causal_lm
    from preflab.training.simpo import length_normalised_margins

    model, tokenizer = load_causal_lm(model_path)
    margins = length_normalised_margins(model, tokenizer, pairs, beta)
    return sum(margins) / len(margins)


def test_simpo_raises_chosen_over_rejected_and_records_a_policy(toy_store, toy_base):
    from datasets import load_from_disk

    url, sessions = toy_store
    report = json.loads(run(url, "train", "simpo", "--model", toy_base, *FAST, "--json").stdout)
    train = load_from_disk(str(Path(report["path"]).parent / "data"))["train"]
    # The length-normalised likelihood of the chosen answers rose over the rejected ones.
    assert mean_margin(report["path"], train) > mean_margin(toy_base, train) + 0.5
    m = report["metrics"]
    assert m["global_step"] == 16 and m["last_loss"] < m["first_loss"]
    assert m["train_rewards_margins"] > 0 and m["train_rewards_accuracies"] > 0.5
    # Held out: the trained policy's SimPO margin is recorded beside the starting model's (12 pairs say little).
    assert m["heldout_pairs"] > 0 and 0 <= m["heldout_reward_accuracy"] <= 1
    assert {"heldout_reward_margin", "heldout_start_reward_margin", "heldout_start_reward_accuracy"} <= set(m)
    with sessions.begin() as session:
        (row,) = session.scalars(select(TrainingRun)).all()
        assert (row.kind, row.status, row.config["beta"], row.config["simpo_gamma"]) == ("simpo", "succeeded", 2.0, 0.5)
        assert row.config["cpo_alpha"] == 0.0  # SimPO as published: no NLL term
        policy = session.get(ModelVersion, row.output_model_version_id)
        assert (policy.kind, policy.name) == ("policy", report["model_version"])
        assert session.get(ModelVersion, policy.parent_id).path == str(toy_base)


def test_simpo_options_are_checked_before_anything_runs(toy_store):
    url, sessions = toy_store
    for args, message in (
        (["--beta", "0"], "--beta must be positive"),
        (["--simpo-gamma", "-1"], "cannot be negative"),
        (["--label-smoothing", "0.5"], "--label-smoothing must be in [0, 0.5)"),
    ):
        result = run(url, "train", "simpo", *args, expect_ok=False)
        assert result.exit_code == 1 and message in result.output
    with sessions.begin() as session:
        assert session.scalars(select(TrainingRun)).all() == []
