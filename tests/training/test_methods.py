"""The table of training methods drives `train`, retrain and the runner; a new method is one entry."""

from __future__ import annotations

import dataclasses

import click
import pytest
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import ModelVersion, TrainingRun
from preflab.errors import ConfigError
from preflab.training.methods import METHODS
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)


def test_each_method_is_a_train_command_with_its_configs_options():
    ctx = click.Context(cli, info_name="preflab")
    train_group = cli.get_command(ctx, "train")
    assert sorted(train_group.list_commands(ctx)) == sorted([*METHODS, "eval"])
    commands = {name: train_group.get_command(ctx, name) for name in METHODS}
    assert {name: c.help for name, c in commands.items()} == {name: m.help for name, m in METHODS.items()}
    run = {"model_name", "dataset_version", "output_dir", "resume", "as_json"}
    for name, command in commands.items():
        fields = {f.name for f in dataclasses.fields(METHODS[name].config)}
        assert fields | run <= {param.name for param in command.params}, name


def test_the_retrain_config_has_a_section_for_each_method_the_table_retrains():
    from preflab.training.retrain.config import parse_retrain_config

    retrained = [name for name, method in METHODS.items() if method.retrain]
    assert retrained == ["reward", "dpo"]
    config = parse_retrain_config({name: {"model": f"start-{name}"} for name in reversed(retrained)})
    assert config.kinds() == retrained  # trained in the table's order: the reward model first
    for name in retrained:
        assert type(config.trains[name]) is METHODS[name].config and config.models[name] == f"start-{name}"
    with pytest.raises(ConfigError, match="unknown key 'simpo'"):
        parse_retrain_config({"simpo": {}})
    with pytest.raises(ConfigError, match=r"add a \[reward\] and/or a \[dpo\] table"):
        parse_retrain_config({"min_new": 1})


@pytest.mark.slow
def test_a_new_method_is_one_entry_run_and_recorded_like_the_others(toy_store, toy_base, monkeypatch):
    from preflab.training import methods, reward
    from preflab.training.config import RewardTrainConfig

    def steps_taken(trainer, plan, config) -> dict:
        return {"steps_taken": trainer.state.global_step}

    entry = methods.Method(
        "reward-copy",
        RewardTrainConfig,
        build=reward.build_reward_trainer,
        model_class="AutoModelForSequenceClassification",
        model_kind="reward",
        evaluate=reward.evaluate_run,
        finish=steps_taken,
        help="A reward model, again.",
    )
    monkeypatch.setitem(methods.METHODS, entry.name, entry)
    _, sessions = toy_store
    config = RewardTrainConfig(
        max_steps=4,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        max_length=16,
        use_cpu=True,
        logging_steps=2,
        save_steps=100,
    )
    result = methods.train("reward-copy", sessions, config, str(toy_base))
    assert (result.kind, result.model_version) == ("reward-copy", f"reward-{result.run_id}")
    assert result.metrics["steps_taken"] == result.metrics["global_step"] == 4
    assert result.metrics["heldout_pairs"] > 0
    with sessions.begin() as session:
        run = session.get(TrainingRun, result.run_id)
        assert (run.kind, run.status, run.config) == ("reward-copy", "succeeded", config.as_dict())
        assert run.metrics["steps_taken"] == 4
        version = session.scalars(select(ModelVersion).where(ModelVersion.id == run.output_model_version_id)).one()
        assert version.kind == "reward" and version.path == result.path
