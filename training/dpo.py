"""`train dpo`: direct preference optimisation with TRL's DPOTrainer.

The policy starts from a base model or a model version; the reference is that
same starting model (its log-probabilities precomputed by default). Held-out
metrics are DPO's implicit reward β·log(π/π_ref): how often it prefers the
chosen response, and by how much.
"""

from __future__ import annotations

from typing import Any

from preflab.lm.loading import load_tokenizer_for_training
from preflab.training.config import DPOTrainConfig
from preflab.training.runs import RunPlan

LOGGED = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected")


def rows_reached(split, config: DPOTrainConfig, processes: int, tokenizer=None):
    """The rows a run stopped by --max-steps trains on: that many, drawn with the run's seed; else the whole split.

    TRL tokenizes every row it is given and, before the first step, computes their
    reference log-probabilities: `train dpo --max-steps 10` on the embedded model spent
    4 of its 10 minutes on the 45 batches of a split it would train 10 of
    (bench/README.md, "DPO: reference log-probabilities for the rows trained on").
    TRL then drops the rows whose prompt alone fills `max_length`; with `tokenizer`,
    those are left out before drawing, so the run still sees as many different pairs.
    """
    needed = rows_needed(config, processes)
    if needed is None or needed >= len(split):
        return split
    # Indices in memory: every rank draws the same rows, and none races the others to write them to a file.
    order = split.shuffle(seed=config.seed, keep_in_memory=True)
    if tokenizer is not None and config.max_length is not None:
        from trl.data_utils import _tokenize  # TRL's own rule (pinned <1.17: tests/training/test_train_dpo.py)

        fits = [
            i
            for i, prompt in enumerate(order["prompt"])
            if len(
                _tokenize(tokenizer, prompt, **({"add_generation_prompt": True} if isinstance(prompt, list) else {}))[
                    "input_ids"
                ]
            )
            < config.max_length
        ]
        if len(fits) > needed:
            return order.select(fits[:needed], keep_in_memory=True)
        return order.select(fits, keep_in_memory=True) if fits else order.select(range(needed))
    return order.select(range(needed))


def rows_needed(config: DPOTrainConfig, processes: int) -> int | None:
    """Rows that --max-steps optimizer steps take on `processes` processes (None: no --max-steps)."""
    if config.max_steps <= 0:
        return None
    return config.max_steps * config.per_device_train_batch_size * config.gradient_accumulation_steps * processes


def build_dpo_trainer(plan: RunPlan, config: DPOTrainConfig):
    from datasets import load_from_disk
    from trl import DPOTrainer

    train_split = load_from_disk(plan.data_dir)["train"].select_columns(["prompt", "chosen", "rejected"])
    args = config.to_trl(plan.checkpoint_dir)
    tokenizer = load_tokenizer_for_training(plan.model_path)
    return DPOTrainer(
        plan.model_path,
        args=args,
        processing_class=tokenizer,
        train_dataset=rows_reached(train_split, config, args.world_size, tokenizer),
        peft_config=config.peft_config("CAUSAL_LM"),
    )


def evaluate_policy_on_pairs(
    policy_path: str, reference_path: str, split, beta: float, batch_size: int = 32
) -> dict[str, Any]:
    """Held-out implicit-reward accuracy and margin of the policy saved at `policy_path` (on `split` in its form)."""
    from preflab.lm.loading import load_causal_lm
    from preflab.lm.scoring import implicit_reward_metrics
    from preflab.training.data import for_model

    if split is None or len(split) == 0:
        return {"heldout_reward_accuracy": None, "heldout_reward_margin": None, "heldout_pairs": 0}
    policy, tokenizer = load_causal_lm(policy_path)
    reference, _ = load_causal_lm(reference_path)
    split = for_model(split, tokenizer, "the held-out pairs")
    result = implicit_reward_metrics(policy, reference, tokenizer, split, beta, batch_size)
    return {f"heldout_{key}" if key != "pairs" else "heldout_pairs": value for key, value in result.items()}


def logged_rewards(trainer) -> dict[str, Any]:
    """The implicit rewards TRL logged last (DPO, SimPO): `train_rewards_accuracies`, `…_margins`, …."""
    logged = [entry for entry in trainer.state.log_history if LOGGED[0] in entry]
    return {f"train_{key.replace('/', '_')}": logged[-1][key] for key in LOGGED} if logged else {}


def finish(trainer, plan: RunPlan, config: DPOTrainConfig) -> dict[str, Any]:
    """The logged rewards, and the passes over the whole split (the trainer got only `rows_reached`)."""
    from datasets import load_from_disk

    out = logged_rewards(trainer)
    rows, needed = len(load_from_disk(plan.data_dir)["train"]), rows_needed(config, trainer.args.world_size)
    if needed is not None and needed < rows:
        out["epochs"] = trainer.state.epoch * needed / rows
    return out


def evaluate_run(plan: RunPlan, config: DPOTrainConfig, sessions=None) -> dict[str, Any]:
    """Held-out implicit-reward accuracy and margin of a run's policy, against its starting model."""
    from preflab.training.data import run_test_split

    return evaluate_policy_on_pairs(
        plan.model_dir, plan.model_path, run_test_split(plan.data_dir), config.beta, config.per_device_eval_batch_size
    )
