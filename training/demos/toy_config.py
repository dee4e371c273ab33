"""The settings of `preflab demo toy` (`preflab.training.demos.toy`): how big the experiment is, which world
and which method, and the training configs each stage uses.

Each field is an option of `preflab demo toy`; the configs are sized for the tiny models of
the digit world and the history world, trained on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preflab.errors import ConfigError

TOY_METHODS = ("dpo", "rl")
TOY_WORLDS = ("digits", "history")


@dataclass
class ToySettings:
    """How big the digit world's experiment is."""

    prompts: int = field(
        default=1000, metadata={"help": "Prompts (train and test) the annotator ranks candidates for."}
    )
    candidates: int = field(
        default=6, metadata={"help": "Candidates sampled per prompt (the distinct ones are ranked)."}
    )
    test_size: float = field(default=0.2, metadata={"help": "Share of the prompts held out."})
    base_steps: int = field(default=400, metadata={"help": "Training steps of the base model on the digit language."})
    seed: int = field(default=0, metadata={"help": "Seed of every random choice."})
    method: str = field(
        default="dpo",
        metadata={
            "help": "How the policy learns the preference: dpo (from the pairs) or rl (RLOO against the reward "
            "model, with a KL penalty).",
            "choices": TOY_METHODS,
        },
    )
    world: str = field(
        default="digits",
        metadata={
            "help": "digits: the preferred first digit follows from the prompt; history: an instruction in an "
            "earlier turn (the system prompt) says which digit to start with, and DPO learns it from the "
            "conversations.",
            "choices": TOY_WORLDS,
        },
    )

    def __post_init__(self) -> None:
        if self.method not in TOY_METHODS:
            raise ConfigError(f"unknown --method {self.method!r} (expected one of {', '.join(TOY_METHODS)})")
        if self.world not in TOY_WORLDS:
            raise ConfigError(f"unknown --world {self.world!r} (expected one of {', '.join(TOY_WORLDS)})")
        if self.world == "history" and self.method != "dpo":
            raise ConfigError("--world history trains its policy with DPO only (leave out --method)")
        if not 20 <= self.prompts <= 100_000:
            raise ConfigError(f"--prompts must be between 20 and 100,000, got {self.prompts:,}")
        if self.candidates < 2:
            raise ConfigError(f"--candidates must be at least 2 (a ranking needs two), got {self.candidates}")
        if not 0 < self.test_size < 1:
            raise ConfigError(f"--test-size must be in (0, 1), got {self.test_size}")
        if self.base_steps < 1:
            raise ConfigError(f"--base-steps must be at least 1, got {self.base_steps}")

    def reward_config(self):
        from preflab.training.config import RewardTrainConfig

        # Grouped: each prompt's candidates scored once (the demo's reward model is InstructGPT-style).
        return RewardTrainConfig(
            grouped=True,
            learning_rate=2e-3,
            num_train_epochs=5,
            per_device_train_batch_size=16,
            warmup_steps=0.1,
            **self._common(),
        )

    def dpo_config(self):
        from preflab.training.config import DPOTrainConfig

        # DPO alone lowers the EOS probability after rejected outputs and, by generalisation, after
        # all of them (the toy's sentences stop ending); the chosen responses' NLL (RPO) keeps it.
        return DPOTrainConfig(
            loss_type="sigmoid,sft",
            beta=0.1,
            learning_rate=5e-4,
            num_train_epochs=1,
            per_device_train_batch_size=32,
            precompute_ref_batch_size=256,
            warmup_steps=0.1,
            **self._common(),
        )

    def history_dpo_config(self):
        from preflab.training.config import DPOTrainConfig

        # Reading the instruction from the system turn takes more passes than the digits world's rule.
        return DPOTrainConfig(
            loss_type="sigmoid,sft",
            beta=0.1,
            learning_rate=1e-3,
            num_train_epochs=3,
            per_device_train_batch_size=32,
            precompute_ref_batch_size=256,
            warmup_steps=0.1,
            **(self._common() | {"max_length": 24}),
        )

    def rl_config(self, reward_model: str):
        from preflab.training.rl import RLTrainConfig

        # 80 steps of 8 prompts × 4 completions; β = 0.1 keeps the later digits on the base rule.
        return RLTrainConfig(
            reward_model=reward_model,
            beta=0.1,
            learning_rate=5e-4,
            max_steps=80,
            per_device_train_batch_size=32,
            n=4,
            max_new_tokens=5,
            eval_prompts=64,
            **self._common(),
        )

    def _common(self) -> dict:
        return {"logging_steps": 5, "save_steps": 10_000, "seed": self.seed, "max_length": 16, "use_cpu": True}
