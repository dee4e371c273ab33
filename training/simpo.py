"""`train simpo`: SimPO, preference optimisation without a reference model.

SimPO's implicit reward is the policy's length-normalised log-likelihood,
β/|y|·log π(y|x), and its loss asks the chosen response to beat the rejected one
by a margin γ: −log σ(β/|y_c|·log π(y_c|x) − β/|y_r|·log π(y_r|x) − γ). No
reference model is loaded or precomputed. TRL ships it as its CPO trainer with
`loss_type="simpo"`, in `trl.experimental` (an API TRL may change: the tests here
pin what preflab relies on).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from preflab.errors import ConfigError
from preflab.lm.loading import load_tokenizer_for_training
from preflab.training.config import TrainConfig
from preflab.training.dpo import logged_rewards
from preflab.training.runs import RunPlan


@dataclass
class SimPOTrainConfig(TrainConfig):
    """SimPO with TRL's CPOTrainer (loss_type="simpo")."""

    learning_rate: float = field(default=1e-6, metadata={"help": "Peak learning rate for AdamW."})
    beta: float = field(
        default=2.0, metadata={"help": "Scale β of the reward β/|y|·log π(y|x) (the SimPO paper uses 2 to 2.5)."}
    )
    simpo_gamma: float = field(
        default=0.5,
        metadata={"help": "Target reward margin γ by which the chosen response should beat the rejected one."},
    )
    cpo_alpha: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the chosen responses' NLL added to the loss (CPO-SimPO); 0 is SimPO as published."
        },
    )
    label_smoothing: float = field(default=0.0, metadata={"help": "Probability that a label is flipped."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta <= 0:
            raise ConfigError(f"--beta must be positive, got {self.beta}")
        if self.simpo_gamma < 0 or self.cpo_alpha < 0:
            raise ConfigError("--simpo-gamma and --cpo-alpha cannot be negative")
        if not 0 <= self.label_smoothing < 0.5:
            raise ConfigError(f"--label-smoothing must be in [0, 0.5), got {self.label_smoothing}")

    def to_trl(self, output_dir: str):
        config_class, _ = cpo_classes()
        # remove_unused_columns=False: TRL's pairwise collator needs the columns (it warns and sets it otherwise).
        return config_class(
            loss_type="simpo",
            beta=self.beta,
            simpo_gamma=self.simpo_gamma,
            cpo_alpha=self.cpo_alpha,
            label_smoothing=self.label_smoothing,
            remove_unused_columns=False,
            **self.trainer_kwargs(output_dir),
        )


def cpo_classes():
    """(CPOConfig, CPOTrainer) from `trl.experimental`, without its import-time notice on stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "you are importing from trl.experimental": said once, in the docs
        from trl.experimental.cpo import CPOConfig, CPOTrainer
    return CPOConfig, CPOTrainer


def build_simpo_trainer(plan: RunPlan, config: SimPOTrainConfig):
    from datasets import load_from_disk

    _, trainer_class = cpo_classes()
    train_split = load_from_disk(plan.data_dir)["train"].select_columns(["prompt", "chosen", "rejected"])
    return trainer_class(
        plan.model_path,
        args=config.to_trl(plan.checkpoint_dir),
        train_dataset=train_split,
        processing_class=load_tokenizer_for_training(plan.model_path),
        peft_config=config.peft_config("CAUSAL_LM"),
    )


def length_normalised_margins(model, tokenizer, split, beta: float, batch_size: int = 32) -> list[float]:
    """SimPO's reward margin per pair: β/|y_c|·log π(y_c|x) − β/|y_r|·log π(y_r|x)."""
    from preflab.lm.scoring import completion_logprobs, completion_split

    prompts = list(split["prompt"])
    rewards = {}
    for side in ("chosen", "rejected"):
        texts = list(split[side])
        logps = completion_logprobs(model, tokenizer, prompts, texts, batch_size)
        lengths = [max(1, len(completion_split(tokenizer, p, t)[1])) for p, t in zip(prompts, texts)]
        rewards[side] = [beta * lp / n for lp, n in zip(logps, lengths)]
    return [c - r for c, r in zip(rewards["chosen"], rewards["rejected"])]


def evaluate_simpo(policy_path: str, start_path: str, split, beta: float, batch_size: int = 32) -> dict[str, Any]:
    """Held-out SimPO reward accuracy and margin of the trained policy, and the starting model's."""
    from preflab.lm.loading import load_causal_lm
    from preflab.training.data import for_model

    if split is None or len(split) == 0:
        return {"heldout_reward_accuracy": None, "heldout_reward_margin": None, "heldout_pairs": 0}
    out: dict[str, Any] = {"heldout_pairs": len(split)}
    for name, path in (("", policy_path), ("start_", start_path)):
        model, tokenizer = load_causal_lm(path)
        margins = length_normalised_margins(
            model, tokenizer, for_model(split, tokenizer, "the held-out pairs"), beta, batch_size
        )
        out[f"heldout_{name}reward_accuracy"] = sum(m > 0 for m in margins) / len(margins)
        out[f"heldout_{name}reward_margin"] = sum(margins) / len(margins)
    return out


def finish(trainer, plan: RunPlan, config: SimPOTrainConfig) -> dict[str, Any]:
    """The rewards TRL logged last (SimPO's length-normalised ones)."""
    return logged_rewards(trainer)


def evaluate_run(plan: RunPlan, config: SimPOTrainConfig, sessions=None) -> dict[str, Any]:
    """Held-out SimPO reward accuracy and margin of a run's policy, and of its starting model."""
    from preflab.training.data import run_test_split

    return evaluate_simpo(
        plan.model_dir, plan.model_path, run_test_split(plan.data_dir), config.beta, config.per_device_eval_batch_size
    )
