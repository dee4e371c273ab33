"""`train reward`: a Bradley–Terry reward model on a dataset version.

Pairwise mode is TRL's RewardTrainer as it is; `grouped` mode is preflab's
GroupedRewardTrainer (one forward pass per candidate, all of a prompt's pairs as
one batch element). `--criterion NAME` trains either on one criterion's pairs
(`preflab.training.criteria`), and names the model's head after it; `--criteria a,b`
trains a multi-objective reward model, one head per criterion
(`preflab.training.multihead`). Either way the run, its exact config, the dataset
version, the held-out pairwise accuracy (per head) and the new `reward` model version
are recorded, with the criteria it is of.
"""

from __future__ import annotations

from typing import Any

from preflab.lm.loading import load_tokenizer_for_training
from preflab.training.config import RewardTrainConfig
from preflab.training.runs import RunPlan


def run_kind(config: RewardTrainConfig) -> str:
    """Grouped, pairwise and multi-objective runs are kinds of their own: `--resume` continues the kind asked for."""
    if config.criteria:
        return "reward-multi"
    return "reward-grouped" if config.grouped else "reward"


def build_reward_trainer(plan: RunPlan, config: RewardTrainConfig):
    from datasets import load_from_disk
    from trl import RewardTrainer

    from preflab.training.grouped import GroupedRewardTrainer
    from preflab.training.multihead import build_multihead_trainer

    if config.criteria:
        return build_multihead_trainer(plan, config)
    train_split = load_from_disk(plan.data_dir)["train"]
    if not config.use_margin and "margin" in train_split.column_names:
        train_split = train_split.remove_columns("margin")  # TRL subtracts a margin whenever the column exists
    common = {
        "args": config.to_trl(plan.checkpoint_dir),
        "train_dataset": train_split,
        "processing_class": load_tokenizer_for_training(plan.model_path),
        "peft_config": config.peft_config("SEQ_CLS"),
    }
    trainer = (
        GroupedRewardTrainer(plan.model_path, use_margin=config.use_margin, **common)
        if config.grouped
        else RewardTrainer(plan.model_path, **common)
    )
    if config.criterion:  # the saved model says what its one head scores
        model_config = trainer.accelerator.unwrap_model(trainer.model).config
        model_config.id2label, model_config.label2id = {0: config.criterion}, {config.criterion: 0}
    return trainer


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
    """Held-out pairwise accuracy of a run's saved reward model on the run's test split (each head on its own
    criterion's pairs), and the criteria it is of."""
    from preflab.training.data import run_test_split
    from preflab.training.multihead import evaluate_heads

    split = run_test_split(plan.data_dir)
    if config.criteria:
        return evaluate_heads(plan.model_dir, split, config.per_device_eval_batch_size)
    metrics = evaluate_reward_model(plan.model_dir, split, config.per_device_eval_batch_size)
    return metrics | ({"criterion": config.criterion} if config.criterion else {})
