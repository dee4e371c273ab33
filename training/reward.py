"""`train reward`: a Bradley–Terry reward model on a dataset version.

Pairwise mode is TRL's RewardTrainer as it is; `grouped` mode is preflab's
GroupedRewardTrainer (one forward pass per candidate, all of a prompt's pairs as
one batch element). Either way the run, its exact config, the dataset version,
the held-out pairwise accuracy and the new `reward` model version are recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.training.config import RewardTrainConfig
from preflab.training.runs import RunPlan, RunResult, execute, run_trainer, save_final, training_summary


def load_tokenizer_for_training(model_path: str):
    """The starting model's own tokenizer (saved unchanged with the result), with a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_reward_trainer(plan: RunPlan, config: RewardTrainConfig):
    from datasets import load_from_disk
    from trl import RewardTrainer

    from preflab.training.grouped import GroupedRewardTrainer

    train_split = load_from_disk(plan.data_dir)["train"]
    if not config.use_margin and "margin" in train_split.column_names:
        train_split = train_split.remove_columns("margin")  # TRL subtracts a margin whenever the column exists
    common = dict(args=config.to_trl(plan.checkpoint_dir), train_dataset=train_split,
                  processing_class=load_tokenizer_for_training(plan.model_path),
                  peft_config=config.peft_config("SEQ_CLS"))
    if config.grouped:
        return GroupedRewardTrainer(plan.model_path, use_margin=config.use_margin, **common)
    return RewardTrainer(plan.model_path, **common)


def evaluate_reward_model(path: str, split, batch_size: int = 32) -> dict[str, Any]:
    """Held-out pairwise accuracy of the reward model saved at `path`."""
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import pairwise_accuracy

    if split is None or len(split) == 0:
        return {"heldout_accuracy": None, "heldout_pairs": 0, "heldout_mean_margin": None}
    model, tokenizer = load_sequence_scorer(path)
    result = pairwise_accuracy(model, tokenizer, split, batch_size)
    return {"heldout_accuracy": result["accuracy"], "heldout_pairs": result["pairs"],
            "heldout_mean_margin": result["mean_margin"]}


def train_reward(sessions: sessionmaker[Session] | None, config: RewardTrainConfig, model_name: str,
                 dataset_version: str | None = None, resume: bool = False, output_dir: str | None = None,
                 callbacks: Sequence = (), reporter: Reporter = SILENT) -> RunResult | None:
    """Train a reward model and record it; returns the result on rank 0 (None on other ranks).

    Args:
        sessions: sessionmaker on rank 0, None on other ranks.
        model_name: starting model: a model version, embedded name, local path or hub id.
        dataset_version: name or id; default the newest (exported first when out of date).
        resume: continue the newest unfinished run of this kind from its last checkpoint.
        callbacks: extra `transformers.TrainerCallback`s.
        reporter: shows a progress bar while training (rank 0) when enabled.
    """
    def train(plan: RunPlan, config: RewardTrainConfig) -> dict[str, Any]:
        from transformers import AutoModelForSequenceClassification

        trainer = build_reward_trainer(plan, config)
        output = run_trainer(trainer, plan, callbacks, reporter)
        save_final(trainer, plan, AutoModelForSequenceClassification)
        return training_summary(trainer, output)

    def evaluate(plan: RunPlan, config: RewardTrainConfig) -> dict[str, Any]:
        from preflab.training.data import run_test_split

        return evaluate_reward_model(plan.model_dir, run_test_split(plan.data_dir), config.per_device_eval_batch_size)

    kind = "reward-grouped" if config.grouped else "reward"
    return execute(kind, config, sessions, model_name, dataset_version, resume, output_dir, train, evaluate,
                   reporter)
