"""`train reward`: a Bradley–Terry reward model on a dataset version.

Pairwise mode is TRL's RewardTrainer as it is; `grouped` mode is preflab's
GroupedRewardTrainer (one forward pass per candidate, all of a prompt's pairs as
one batch element). Either way the run, its exact config, the dataset version,
the held-out pairwise accuracy and the new `reward` model version are recorded.
"""

from __future__ import annotations

from typing import Any

from preflab.lm.loading import load_tokenizer_for_training
from preflab.training.config import RewardTrainConfig
from preflab.training.runs import RunPlan


def run_kind(config: RewardTrainConfig) -> str:
    """Grouped and pairwise runs are kinds of their own: `--resume` continues the kind asked for."""
    return "reward-grouped" if config.grouped else "reward"


def build_reward_trainer(plan: RunPlan, config: RewardTrainConfig):
    from datasets import load_from_disk
    from trl import RewardTrainer

    from preflab.training.grouped import GroupedRewardTrainer

    train_split = load_from_disk(plan.data_dir)["train"]
    if not config.use_margin and "margin" in train_split.column_names:
        train_split = train_split.remove_columns("margin")  # TRL subtracts a margin whenever the column exists
    common = {
        "args": config.to_trl(plan.checkpoint_dir),
        "train_dataset": train_split,
        "processing_class": load_tokenizer_for_training(plan.model_path),
        "peft_config": config.peft_config("SEQ_CLS"),
    }
    if config.grouped:
        return GroupedRewardTrainer(plan.model_path, use_margin=config.use_margin, **common)
    return RewardTrainer(plan.model_path, **common)


def evaluate_reward_model(path: str, split, batch_size: int = 32) -> dict[str, Any]:
    """Held-out pairwise accuracy of the reward model saved at `path`, on `split` in the form it trained on."""
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import pairwise_accuracy
    from preflab.training.data import for_model

    if split is None or len(split) == 0:
        return {"heldout_accuracy": None, "heldout_pairs": 0, "heldout_mean_margin": None}
    model, tokenizer = load_sequence_scorer(path)
    result = pairwise_accuracy(model, tokenizer, for_model(split, tokenizer, "the held-out pairs"), batch_size)
    return {
        "heldout_accuracy": result["accuracy"],
        "heldout_pairs": result["pairs"],
        "heldout_mean_margin": result["mean_margin"],
    }


def evaluate_run(plan: RunPlan, config: RewardTrainConfig, sessions=None) -> dict[str, Any]:
    """Held-out pairwise accuracy of a run's saved reward model on the run's test split."""
    from preflab.training.data import run_test_split

    return evaluate_reward_model(plan.model_dir, run_test_split(plan.data_dir), config.per_device_eval_batch_size)
