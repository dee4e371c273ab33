"""Training configs: checked on construction, stored as given, mapped onto TRL's configs."""

import dataclasses
import re

import pytest

from preflab.errors import ConfigError
from preflab.training.config import DPOTrainConfig, RewardTrainConfig


@pytest.mark.parametrize(
    "cls, values, message",
    [
        (RewardTrainConfig, {"learning_rate": 0}, "--learning-rate must be positive"),
        (RewardTrainConfig, {"per_device_train_batch_size": 0}, "--per-device-train-batch-size must be at least 1"),
        (RewardTrainConfig, {"num_train_epochs": 0, "max_steps": -1}, "set --num-train-epochs or --max-steps"),
        (RewardTrainConfig, {"lr_scheduler_type": "zigzag"}, "unknown --lr-scheduler-type"),
        (RewardTrainConfig, {"lora_dropout": 1.5}, "--lora-dropout must be in [0, 1)"),
        (DPOTrainConfig, {"beta": -0.1}, "--beta must be positive"),
        (DPOTrainConfig, {"label_smoothing": 0.5}, "--label-smoothing must be in [0, 0.5)"),
        (DPOTrainConfig, {"loss_type": "exo_pair"}, "needs --label-smoothing > 0"),
        (DPOTrainConfig, {"loss_type": "sigmoid,sft", "loss_weights": "1,x"}, "--loss-weights must be numbers"),
    ],
)
def test_bad_values_are_one_sentence(cls, values, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        cls(**values)


def test_every_field_has_help():
    for cls in (RewardTrainConfig, DPOTrainConfig):
        assert all(f.metadata.get("help") for f in dataclasses.fields(cls)), cls


def test_stored_config_round_trips_and_ignores_unknown_keys():
    config = DPOTrainConfig(beta=0.3, loss_type="sigmoid,sft", loss_weights="1,0.5", lora=True)
    stored = config.as_dict() | {"from_a_newer_preflab": 1}
    assert DPOTrainConfig.from_dict(stored) == config


def test_mapping_onto_trl_uses_preflab_defaults_on_cpu(tmp_path):
    dpo = DPOTrainConfig(loss_type="sigmoid,sft", loss_weights="1,0.2", use_cpu=True).to_trl(str(tmp_path))
    assert dpo.loss_type == ["sigmoid", "sft"] and dpo.loss_weights == [1.0, 0.2]
    assert dpo.precompute_ref_log_probs is True and dpo.gradient_checkpointing is False
    assert dpo.bf16 is False and dpo.use_cpu is True and dpo.report_to == []
    reward = RewardTrainConfig(center_rewards_coefficient=0.01, use_cpu=True).to_trl(str(tmp_path))
    assert reward.center_rewards_coefficient == 0.01 and reward.gradient_checkpointing is False
    with pytest.raises(ConfigError, match="--bf16 needs a GPU"):
        RewardTrainConfig(bf16=True, use_cpu=True).to_trl(str(tmp_path))
    lora = RewardTrainConfig(lora=True, lora_r=4, lora_target_modules="q_proj, v_proj").peft_config("SEQ_CLS")
    assert lora.r == 4 and set(lora.target_modules) == {"q_proj", "v_proj"} and lora.modules_to_save == ["score"]
