"""`train dpo --loss`: the list of DPO losses is the installed TRL's, and each name is a loss TRL computes."""

import inspect

from click.testing import CliRunner

from preflab.cli import cli


def test_the_loss_list_is_read_from_the_installed_trl_and_matches_its_trainer():
    from trl import DPOConfig, DPOTrainer

    from preflab.training.config import DPO_LOSS_TYPES, installed_dpo_losses

    assert installed_dpo_losses() == DPO_LOSS_TYPES and {"sigmoid", "ipo", "robust", "sft"} <= set(DPO_LOSS_TYPES)
    source = inspect.getsource(DPOTrainer)
    # Every listed name is a branch of TRL's loss, and every branch is listed.
    branches = {name for name in DPO_LOSS_TYPES if f'loss_type == "{name}"' in source}
    assert branches == set(DPO_LOSS_TYPES)
    assert DPOConfig(output_dir="x", loss_type=list(DPO_LOSS_TYPES[:2]), use_cpu=True).loss_type == list(
        DPO_LOSS_TYPES[:2]
    )


def test_dpo_takes_losses_mixed_with_weights_and_refuses_unknown_ones(tmp_path):
    from preflab.training.config import DPOTrainConfig

    config = DPOTrainConfig(loss_type="sigmoid,sft", loss_weights="1,0.2", use_cpu=True)
    trl_config = config.to_trl(str(tmp_path))
    assert trl_config.loss_type == ["sigmoid", "sft"] and trl_config.loss_weights == [1.0, 0.2]
    url = f"sqlite:///{tmp_path / 'x.db'}"
    result = CliRunner().invoke(cli, ["--database-url", url, "train", "dpo", "--loss", "sigmoid,simpo"])
    assert result.exit_code == 1 and "unknown --loss-type 'simpo'" in result.output
    help_text = CliRunner().invoke(cli, ["train", "dpo", "--help"]).output
    assert "--loss, --loss-type" in help_text and "apo_zero" in help_text
